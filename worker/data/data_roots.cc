#include "worker/data/data_roots.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tagi::data {

namespace {

// `path` absolute and resolved as far as it exists; empty when it cannot be.
std::filesystem::path Resolved(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) return {};
  std::filesystem::path resolved = std::filesystem::weakly_canonical(absolute, ec);
  if (ec) return {};
  return resolved.lexically_normal();
}

bool Within(const std::filesystem::path& path, const std::filesystem::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> DefaultDataRoots() {
  return {"/usr/share/datasets", "/var/lib/tagi/data"};
}

absl::Status CheckUnderRoots(const std::string& field, const std::string& path,
                             const std::vector<std::string>& roots) {
  const std::filesystem::path resolved = Resolved(path);
  if (!resolved.empty()) {
    for (const std::string& root : roots) {
      const std::filesystem::path r = Resolved(root);
      if (!r.empty() && Within(resolved, r)) return absl::OkStatus();
    }
  }
  return absl::PermissionDeniedError(absl::StrCat(
      field, ": ", path, " is outside the directories this worker reads data from (",
      absl::StrJoin(roots, ", "),
      "); its operator can allow more with tagi-worker --data-root DIR,DIR,..."));
}

}  // namespace tagi::data
