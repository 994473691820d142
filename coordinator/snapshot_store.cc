#include "coordinator/snapshot_store.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status.h"
#include "worker/engine/architecture.h"
#include "worker/engine/model_file.h"

namespace tagi {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPrefix = "snapshot-";
constexpr std::string_view kSuffix = ".tagisnap";
constexpr size_t kStepDigits = 12;

// This abseil's string_view is its own type, not std::string_view.
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool IsJobIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

absl::Status FsError(const std::string& what, const fs::path& path, const std::error_code& ec) {
  return absl::InternalError(absl::StrCat(what, " ", path.string(), ": ", ec.message()));
}

// Newest first: by the global step the name encodes; names that encode none
// (only possible in ChooseSnapshot's input) sort last.
bool NewerName(std::string_view a, std::string_view b) {
  const auto sa = ParseSnapshotFileName(a);
  const auto sb = ParseSnapshotFileName(b);
  if (sa.has_value() != sb.has_value()) return sa.has_value();
  if (sa.has_value() && *sa != *sb) return *sa > *sb;
  return a > b;
}

}  // namespace

absl::Status ValidateSnapshotJobId(std::string_view job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job id is empty");
  if (job_id.size() > kMaxJobIdBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "job id is %d bytes long; at most %d are allowed", job_id.size(), kMaxJobIdBytes));
  }
  if (job_id.front() == '.') {
    return absl::InvalidArgumentError(
        absl::StrCat("job id \"", absl::CEscape(Absl(job_id)), "\" must not start with '.'"));
  }
  for (const char c : job_id) {
    if (!IsJobIdChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job id \"", absl::CEscape(Absl(job_id)),
          "\" holds a character outside [A-Za-z0-9._-]; path characters are not allowed"));
    }
  }
  return absl::OkStatus();
}

std::string SnapshotFileName(uint64_t global_step) {
  return absl::StrFormat("%s%012d%s", Absl(kPrefix), global_step, Absl(kSuffix));
}

std::optional<uint64_t> ParseSnapshotFileName(std::string_view name) {
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  name.remove_suffix(kSuffix.size());
  if (name.size() < kStepDigits ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  uint64_t step = 0;
  if (!absl::SimpleAtoi(Absl(name), &step)) return std::nullopt;
  // Only the canonical spelling: "snapshot-0000000000042" (13 digits) is not 42's file.
  const std::string spelled = std::string(kPrefix) + std::string(name) + std::string(kSuffix);
  if (SnapshotFileName(step) != spelled) return std::nullopt;
  return step;
}

absl::Status CheckSnapshotCandidate(std::string_view job_id, const SnapshotCandidate& c) {
  const std::optional<uint64_t> step = ParseSnapshotFileName(c.name);
  if (!step.has_value()) {
    return absl::InvalidArgumentError("not a snapshot file name");
  }
  if (!c.decoded.ok()) return c.decoded.status();
  const Snapshot& s = *c.decoded;
  if (s.job_id != job_id) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "holds a snapshot of job \"%s\", not \"%s\"", absl::CEscape(s.job_id), Absl(job_id)));
  }
  if (s.global_step != *step) {
    return absl::FailedPreconditionError(
        absl::StrFormat("holds global step %d but its name says %d", s.global_step, *step));
  }
  return absl::OkStatus();
}

absl::StatusOr<SnapshotChoice> ChooseSnapshot(std::string_view job_id,
                                              std::span<const SnapshotCandidate> candidates) {
  std::vector<size_t> order(candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return NewerName(candidates[a].name, candidates[b].name); });
  SnapshotChoice choice;
  for (const size_t i : order) {
    const absl::Status st = CheckSnapshotCandidate(job_id, candidates[i]);
    if (st.ok()) {
      choice.index = i;
      return choice;
    }
    choice.skipped.push_back(absl::StrCat(candidates[i].name, ": ", st.ToString()));
  }
  return absl::NotFoundError(absl::StrFormat(
      "no usable snapshot of job %s%s%s", Absl(job_id),
      choice.skipped.empty() ? "" : "; skipped: ", absl::StrJoin(choice.skipped, "; ")));
}

SnapshotStore::SnapshotStore(std::string dir, size_t keep_last, FileSystem* fs)
    : dir_(std::move(dir)), keep_last_(keep_last), fs_(fs != nullptr ? *fs : real_fs_) {
  ABSL_RAW_CHECK(keep_last_ >= 1, "SnapshotStore needs keep_last >= 1");
}

std::string SnapshotStore::JobDir(const std::string& job_id) const {
  return (fs::path(dir_) / job_id).string();
}

absl::StatusOr<std::vector<std::string>> SnapshotStore::ListLocked(const std::string& job_id) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(JobDir(job_id), ec);
  if (ec == std::errc::no_such_file_or_directory) return names;
  if (ec) return FsError("cannot list", JobDir(job_id), ec);
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (ParseSnapshotFileName(name).has_value()) names.push_back(name);
  }
  if (ec) return FsError("cannot list", JobDir(job_id), ec);
  std::sort(names.begin(), names.end(),
            [](const std::string& a, const std::string& b) { return NewerName(b, a); });
  return names;
}

absl::StatusOr<std::vector<std::string>> SnapshotStore::List(const std::string& job_id) {
  TAGI_RETURN_IF_ERROR(ValidateSnapshotJobId(job_id));
  absl::MutexLock lock(&mu_);
  return ListLocked(job_id);
}

absl::Status SnapshotStore::PruneLocked(const std::string& job_id) {
  TAGI_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListLocked(job_id));
  if (names.size() <= keep_last_) return absl::OkStatus();
  const size_t excess = names.size() - keep_last_;
  for (size_t i = 0; i < excess; ++i) {
    const fs::path path = fs::path(JobDir(job_id)) / names[i];
    std::error_code ec;
    fs::remove(path, ec);
    if (ec) return FsError("snapshot stored, but cannot prune", path, ec);
  }
  return absl::OkStatus();
}

absl::StatusOr<Snapshot> CheckSnapshotUpload(const std::string& job_id, uint64_t global_step,
                                              std::span<const char> bytes) {
  TAGI_RETURN_IF_ERROR(ValidateSnapshotJobId(job_id));
  absl::StatusOr<Snapshot> decoded = DecodeSnapshot(bytes);
  if (!decoded.ok()) {
    return absl::Status(decoded.status().code(),
                        absl::StrCat("refusing the snapshot upload of job ", job_id, " step ",
                                     global_step, ": ", decoded.status().message()));
  }
  if (decoded->job_id != job_id || decoded->global_step != global_step) {
    return absl::InvalidArgumentError(
        absl::StrFormat("snapshot upload for job %s step %d holds job \"%s\" step %d", job_id,
                        global_step, absl::CEscape(decoded->job_id), decoded->global_step));
  }
  return decoded;
}

absl::Status CheckSnapshotValues(const tagi::v1::JobSpec& spec, const Snapshot& snapshot) {
  absl::StatusOr<engine::Architecture> arch = engine::ArchitectureFromJobSpec(spec);
  if (!arch.ok()) return arch.status();
  const size_t expected = 2 * arch->num_parameters();
  if (snapshot.parameters.size() != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "refusing the snapshot upload of job %s step %d: %d parameter values, the job's network "
        "has %d",
        snapshot.job_id, snapshot.global_step, snapshot.parameters.size(), expected));
  }
  if (auto st = engine::CheckParameterValues(snapshot.parameters, snapshot.state); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("refusing the snapshot upload of job %s step %d: %s", snapshot.job_id,
                        snapshot.global_step, st.message()));
  }
  return absl::OkStatus();
}

absl::Status SnapshotStore::Put(const std::string& job_id, uint64_t global_step,
                                const std::string& bytes) {
  TAGI_RETURN_IF_ERROR(CheckSnapshotUpload(job_id, global_step, bytes).status());
  return PutChecked(job_id, global_step, bytes);
}

absl::Status SnapshotStore::PutChecked(const std::string& job_id, uint64_t global_step,
                                       const std::string& bytes) {
  TAGI_RETURN_IF_ERROR(ValidateSnapshotJobId(job_id));  // the path is built from it
  absl::MutexLock lock(&mu_);
  const fs::path job_dir = JobDir(job_id);
  TAGI_RETURN_IF_ERROR(
      fs_.WriteFileAtomic((job_dir / SnapshotFileName(global_step)).string(), bytes));
  return PruneLocked(job_id);
}

absl::StatusOr<LatestSnapshot> SnapshotStore::Latest(const std::string& job_id) {
  TAGI_RETURN_IF_ERROR(ValidateSnapshotJobId(job_id));
  absl::MutexLock lock(&mu_);
  TAGI_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListLocked(job_id));
  // Read newest first and stop at the first usable file, so that at most one
  // good snapshot is held in memory; ChooseSnapshot then decides over what was
  // read, exactly as it would over the whole directory.
  std::vector<SnapshotCandidate> candidates;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    const std::string path = (fs::path(JobDir(job_id)) / *it).string();
    absl::StatusOr<std::string> bytes = ReadFile(path, kMaxSnapshotBytes);
    SnapshotCandidate c{*it, bytes.ok() ? DecodeSnapshot(*bytes) : bytes.status()};
    const bool usable = CheckSnapshotCandidate(job_id, c).ok();
    candidates.push_back(std::move(c));
    if (usable) break;
  }
  TAGI_ASSIGN_OR_RETURN(SnapshotChoice choice, ChooseSnapshot(job_id, candidates));
  LatestSnapshot latest;
  latest.path = (fs::path(JobDir(job_id)) / candidates[choice.index].name).string();
  latest.snapshot = *std::move(candidates[choice.index].decoded);
  latest.skipped = std::move(choice.skipped);
  return latest;
}

}  // namespace tagi
