#include "ctl/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/file_util.h"
#include "common/status.h"
#include "common/worker_credentials.h"

namespace tagi {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(20);

std::string Describe(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("was killed by signal ", WTERMSIG(status));
  return "stopped";
}

absl::Status WritePrivateFile(const std::string& path, const std::string& contents) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  const bool ok = ::write(fd, contents.data(), contents.size()) ==
                  static_cast<ssize_t>(contents.size());
  ::close(fd);
  if (!ok) return absl::InternalError(absl::StrCat(path, ": short write"));
  return absl::OkStatus();
}

std::string Tail(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  const std::string s = all.str();
  return s.size() <= bytes ? s : "..." + s.substr(s.size() - bytes);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const LocalClusterOptions& options) {
  if (options.nproc < 1) return absl::InvalidArgumentError("--nproc must be at least 1");
  for (const std::string& root : options.data_roots) {
    if (absl::StrContains(root, ',')) {
      return absl::InvalidArgumentError(
          absl::StrCat("data root \"", root, "\" holds a comma; the workers' --data-root "
                       "is a comma-separated list"));
    }
  }
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  std::string templ = (std::filesystem::temp_directory_path() / "tagi-run.XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr) {  // mode 0700
    return absl::InternalError(absl::StrCat("cannot make a directory ", templ, ": ",
                                            std::strerror(errno)));
  }
  c->dir_ = templ;
  TAGI_ASSIGN_OR_RETURN(const std::string join, RandomHex(16));
  TAGI_ASSIGN_OR_RETURN(const std::string api, RandomHex(16));
  const std::string join_file = c->dir_ + "/join.token";
  const std::string api_file = c->dir_ + "/api.tokens";
  TAGI_RETURN_IF_ERROR(WritePrivateFile(join_file, join + "\n"));
  TAGI_RETURN_IF_ERROR(WritePrivateFile(api_file, api + "\n"));
  c->security_.metadata_key = kAuthorizationMetadataKey;
  c->security_.metadata_value = "Bearer " + api;

  const std::string port_file = c->dir_ + "/port";
  const int world = options.world > 0 ? options.world : options.nproc;
  TAGI_RETURN_IF_ERROR(c->Launch(
      "tagi-coordinator",
      {options.bin_dir + "/tagi-coordinator", "--world", std::to_string(world), "--listen",
       "127.0.0.1:0", "--port-file", port_file, "--state-dir", c->dir_ + "/state",
       "--join-token-file", join_file, "--api-tokens-file", api_file}));
  TAGI_RETURN_IF_ERROR(c->AwaitPort(port_file, options.start_timeout));
  for (int i = 0; i < options.nproc; ++i) {
    std::vector<std::string> argv = {options.bin_dir + "/tagi-worker", "--coord", c->target_,
                                     "--threads", std::to_string(options.threads),
                                     "--join-token-file", join_file};
    if (!options.devices.empty()) {
      argv.insert(argv.end(), {"--device", options.devices[i % options.devices.size()]});
    }
    if (!options.data_roots.empty()) {  // one list: the worker's flag keeps its last value
      argv.insert(argv.end(), {"--data-root", absl::StrJoin(options.data_roots, ",")});
    }
    TAGI_RETURN_IF_ERROR(c->Launch(absl::StrCat("tagi-worker ", i + 1), argv));
  }
  return c;
}

absl::Status LocalCluster::Launch(const std::string& name, const std::vector<std::string>& argv) {
  if (::access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(argv[0], " cannot be run (", std::strerror(errno),
                                            "); pass --bin-dir"));
  }
  Process p;
  p.name = name;
  p.log = absl::StrCat(dir_, "/", absl::StrReplaceAll(name, {{" ", "-"}}), ".log");
  const int log = ::open(p.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log < 0) return absl::InternalError(absl::StrCat(p.log, ": ", std::strerror(errno)));
  // Everything the child needs, made before fork: after it, only
  // async-signal-safe calls (the parent has threads).
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // tagi-run already died
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(log);
  ::setpgid(pid, pid);  // also here: no race with a signal sent right away
  p.pid = pid;
  processes_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status LocalCluster::AwaitPort(const std::string& port_file, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (std::optional<std::string> dead = Dead(); dead.has_value()) {
      return absl::UnavailableError(absl::StrCat(*dead, " while starting"));
    }
    std::ifstream in(port_file);
    std::string text;
    int port = 0;
    if (in && std::getline(in, text) && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) &&
        port > 0) {
      target_ = absl::StrCat("127.0.0.1:", port);
      return absl::OkStatus();
    }
    absl::SleepFor(kPoll);
  }
  return absl::DeadlineExceededError(absl::StrFormat(
      "the coordinator did not listen within %s", absl::FormatDuration(timeout)));
}

std::optional<std::string> LocalCluster::Dead() {
  for (Process& p : processes_) {
    if (!p.reaped && ::waitpid(p.pid, &p.status, WNOHANG) == p.pid) p.reaped = true;
    if (p.reaped) return absl::StrCat(p.name, " ", Describe(p.status));
  }
  return std::nullopt;
}

std::string LocalCluster::LogTails(size_t bytes) const {
  std::string out;
  for (const Process& p : processes_) {
    absl::StrAppend(&out, "---- ", p.name, " (log) ----\n", Tail(p.log, bytes));
    if (!out.empty() && out.back() != '\n') out += '\n';
  }
  return out;
}

void LocalCluster::Kill() {
  killed_ = true;
  for (const Process& p : processes_) {
    if (p.pid > 0) ::kill(-p.pid, SIGKILL);
  }
}

void LocalCluster::Stop(absl::Duration grace) {
  if (stopped_) return;
  stopped_ = true;
  for (const Process& p : processes_) {
    if (!p.reaped) ::kill(-p.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  for (Process& p : processes_) {
    while (!p.reaped) {
      const pid_t r = ::waitpid(p.pid, &p.status, WNOHANG);
      if (r == p.pid || (r < 0 && errno == ECHILD)) {
        p.reaped = true;
        break;
      }
      if (absl::Now() >= deadline) {
        ::kill(-p.pid, SIGKILL);
        (void)::waitpid(p.pid, &p.status, 0);
        p.reaped = true;
        break;
      }
      absl::SleepFor(kPoll);
    }
  }
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

LocalCluster::~LocalCluster() { Stop(); }

}  // namespace tagi
