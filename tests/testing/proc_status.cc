#include "tests/testing/proc_status.h"

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"

namespace tagi::testing {

int64_t ProcStatusField(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, field + ":")) continue;
    int64_t value = -1;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    return absl::SimpleAtoi(digits, &value) ? value : -1;
  }
  return -1;
}

}  // namespace tagi::testing
