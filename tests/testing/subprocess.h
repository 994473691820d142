// Runs a real binary for integration tests: captures stdout and stderr,
// enforces a deadline (the child is killed, never left behind) and reports
// how it ended. Thread-compatible; each call owns its child.
#ifndef TAGI_TESTS_TESTING_SUBPROCESS_H_
#define TAGI_TESTS_TESTING_SUBPROCESS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tagi::testing {

struct ProcessResult {
  int exit_code = -1;     // valid when !signaled && !timed_out
  int signal = 0;         // the terminating signal, when signaled
  bool signaled = false;
  bool timed_out = false;
  std::string out;
  std::string err;
};

// argv[0] is the program path. The child's stdin is /dev/null.
ProcessResult RunProcess(const std::vector<std::string>& argv, absl::Duration timeout);

// A fresh directory under the system temp dir, removed with its contents
// when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Writes `contents` to File(name) and returns its path.
  std::string Write(const std::string& name, const std::string& contents) const;

 private:
  std::string path_;
};

}  // namespace tagi::testing

#endif  // TAGI_TESTS_TESTING_SUBPROCESS_H_
