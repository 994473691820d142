// A real binary running in the background for integration tests, owned by
// one object: its stdout and stderr go to files in a TempDir (read them at
// any time), and the destructor SIGKILLs and reaps a child that is still
// running, so a failing test leaves no process behind. The child also gets
// SIGKILL if the test process dies first (PR_SET_PDEATHSIG).
// Not thread-safe: one thread owns each ChildProcess.
#ifndef TAGI_TESTS_TESTING_CHILD_PROCESS_H_
#define TAGI_TESTS_TESTING_CHILD_PROCESS_H_

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/testing/subprocess.h"

namespace tagi::testing {

// How a child ended.
struct ExitStatus {
  bool signaled = false;
  int code = -1;   // the exit code, when !signaled
  int signal = 0;  // the terminating signal, when signaled
  bool ExitedWith(int c) const { return !signaled && code == c; }
  std::string ToString() const;  // "exit 0", "signal 9 (Killed)"
};

class ChildProcess {
 public:
  // Starts argv (argv[0] is the program path; stdin is /dev/null) with
  // stdout in dir.File(name + ".out") and stderr in dir.File(name + ".err").
  // Throws std::runtime_error when it cannot fork; a program that cannot be
  // executed exits 127.
  ChildProcess(const std::vector<std::string>& argv, const TempDir& dir, const std::string& name);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t Pid() const { return pid_; }
  const std::string& name() const { return name_; }
  // Sends `sig`; false when the child has already been reaped.
  bool Signal(int sig);
  // Waits up to `timeout` for the child to end; nullopt if it is still
  // running then. Once it ended, every call returns the same status.
  std::optional<ExitStatus> WaitExit(absl::Duration timeout);
  bool Alive();
  // What the child wrote so far.
  std::string Stdout() const;
  std::string Stderr() const;
  const std::string& stdout_path() const { return out_path_; }
  const std::string& stderr_path() const { return err_path_; }

 private:
  bool Reap(bool block);

  std::string name_;
  std::string out_path_;
  std::string err_path_;
  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
};

// Calls `condition` every `interval` until it returns true (then true) or
// `timeout` has passed (then false, after one last call).
bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout,
               absl::Duration interval = absl::Milliseconds(20));

// The contents of `path`, or "" when it cannot be read.
std::string ReadFileOrEmpty(const std::string& path);

}  // namespace tagi::testing

#endif  // TAGI_TESTS_TESTING_CHILD_PROCESS_H_
