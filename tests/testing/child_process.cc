#include "tests/testing/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "absl/time/clock.h"

namespace tagi::testing {
namespace {

int OpenForChild(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
  return fd;
}

}  // namespace

std::string ExitStatus::ToString() const {
  if (signaled) return "signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
  return "exit " + std::to_string(code);
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const TempDir& dir,
                           const std::string& name)
    : name_(name), out_path_(dir.File(name + ".out")), err_path_(dir.File(name + ".err")) {
  if (argv.empty()) throw std::invalid_argument("ChildProcess needs a program");
  // Everything the child needs is prepared before fork(): between fork and
  // exec it only calls async-signal-safe functions.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int in_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out_fd = OpenForChild(out_path_);
  const int err_fd = OpenForChild(err_path_);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);  // the test died before prctl
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(in_fd, STDIN_FILENO);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(in_fd);
  ::close(out_fd);
  ::close(err_fd);
  if (pid_ < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_.has_value()) {
    ::kill(pid_, SIGKILL);
    Reap(/*block=*/true);
  }
}

bool ChildProcess::Reap(bool block) {
  if (status_.has_value()) return true;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) return false;
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signaled = true;
    s.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    s.code = WEXITSTATUS(status);
  }
  status_ = s;
  return true;
}

bool ChildProcess::Signal(int sig) {
  if (Reap(/*block=*/false)) return false;
  return ::kill(pid_, sig) == 0;
}

std::optional<ExitStatus> ChildProcess::WaitExit(absl::Duration timeout) {
  WaitUntil([this] { return Reap(/*block=*/false); }, timeout, absl::Milliseconds(10));
  return status_;
}

bool ChildProcess::Alive() { return !Reap(/*block=*/false); }

std::string ChildProcess::Stdout() const { return ReadFileOrEmpty(out_path_); }
std::string ChildProcess::Stderr() const { return ReadFileOrEmpty(err_path_); }

bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout,
               absl::Duration interval) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(absl::ToInt64Microseconds(interval)));
  }
  return condition();
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace tagi::testing
