#include "common/flags.h"

#include <cstdio>
#include <cstring>

#include "absl/flags/parse.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tagi {

namespace {

// --help lists the flags defined in this project's files: absl's default
// lists only those of a file named like the program (tagi-train.cc), which
// none of ours is, and printed "No flags matched." for every binary.
bool IsProjectFlagFile(absl::string_view file) { return !absl::StrContains(file, "absl/"); }

}  // namespace

std::vector<char*> ParseFlags(int argc, char** argv) {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = IsProjectFlagFile;
  config.contains_helpshort_flags = IsProjectFlagFile;
  absl::SetFlagsUsageConfig(config);
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    if (std::strcmp(arg, "--") == 0) break;
    if (std::strncmp(arg, "--", 2) != 0) continue;
    for (char* p = arg + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
  return absl::ParseCommandLine(argc, argv);
}

absl::StatusOr<std::vector<std::string>> TakeRepeatedFlag(int& argc, char** argv,
                                                          absl::string_view name) {
  auto normal = [](absl::string_view s) {
    std::string out(s);
    for (char& c : out) c = c == '-' ? '_' : c;
    return out;
  };
  const std::string want = normal(name);
  std::vector<std::string> values;
  int kept = 1;
  int i = 1;
  for (; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    const size_t eq = arg.find('=');
    const bool flag = arg.size() > 2 && arg.substr(0, 2) == "--";
    if (flag && normal(arg.substr(2, eq == absl::string_view::npos ? arg.npos : eq - 2)) == want) {
      if (eq != absl::string_view::npos) {
        values.emplace_back(arg.substr(eq + 1));
      } else if (i + 1 < argc) {
        values.emplace_back(argv[++i]);
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      continue;
    }
    argv[kept++] = argv[i];
  }
  for (; i < argc; ++i) argv[kept++] = argv[i];
  argc = kept;
  argv[argc] = nullptr;
  return values;
}

bool ValidHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  if (address.size() - colon - 1 > 5) return false;
  int port = 0;
  for (size_t i = colon + 1; i < address.size(); ++i) {
    if (address[i] < '0' || address[i] > '9') return false;
    port = port * 10 + (address[i] - '0');
  }
  return port <= 65535;
}

bool IsLoopbackAddress(const std::string& address) {
  if (!ValidHostPort(address)) return false;
  const std::string host = address.substr(0, address.rfind(':'));
  if (host == "localhost" || host == "[::1]") return true;
  int a = 0, b = 0, c = 0, d = 0;
  char tail = 0;
  return std::sscanf(host.c_str(), "%d.%d.%d.%d%c", &a, &b, &c, &d, &tail) == 4 && a == 127 &&
         b >= 0 && b <= 255 && c >= 0 && c <= 255 && d >= 0 && d <= 255;
}

}  // namespace tagi
