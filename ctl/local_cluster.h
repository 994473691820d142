// LocalCluster: a coordinator and N workers on this host's loopback, as
// tagi-run starts them for one job.
//
// Everything lives in a private directory (mode 0700) made for the run:
// the coordinator's state, the processes' logs, a join token and an API
// token (so another user of this host cannot join the cluster or call its
// API). The coordinator listens on an OS-chosen loopback port. Every
// process is started in its own process group (a Ctrl-C in the terminal
// reaches tagi-run only, which decides what to do) and dies with tagi-run
// if tagi-run is killed (PR_SET_PDEATHSIG). Stop() stops them (SIGTERM,
// then SIGKILL after a grace period) and removes the directory; the
// destructor does it too. Not thread-safe, except Kill().
#ifndef TAGI_CTL_LOCAL_CLUSTER_H_
#define TAGI_CTL_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"

namespace tagi {

struct LocalClusterOptions {
  int nproc = 2;
  int threads = 1;  // BLAS threads per worker
  // Where tagi-coordinator and tagi-worker are.
  std::string bin_dir;
  // Each worker's --device, in turn (empty: every worker on the CPU).
  std::vector<std::string> devices;
  // The workers' --data-root directories.
  std::vector<std::string> data_roots;
  // The coordinator's --world (the largest world of a job).
  int world = 0;  // 0: nproc
  absl::Duration start_timeout = absl::Seconds(30);
};

class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options);
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  const std::string& target() const { return target_; }  // 127.0.0.1:PORT
  const std::string& dir() const { return dir_; }
  // The API token as client metadata, for the Jobs calls.
  const ClientSecurity& security() const { return security_; }

  // The first process found dead, as "tagi-worker 2 exited with status 1";
  // nothing while all live.
  std::optional<std::string> Dead();
  // The last `bytes` of every process's log, each under its name.
  std::string LogTails(size_t bytes) const;
  // SIGKILL to every process group now (async-signal-safe enough to call
  // from another thread: it only reads the pids).
  void Kill();
  // Stops every process (SIGTERM; SIGKILL after `grace`), reaps them and
  // removes the directory. Idempotent.
  void Stop(absl::Duration grace = absl::Seconds(5));

 private:
  struct Process {
    std::string name;  // "tagi-coordinator", "tagi-worker 1", ...
    std::string log;
    pid_t pid = -1;
    bool reaped = false;
    int status = 0;
  };
  LocalCluster() = default;
  absl::Status Launch(const std::string& name, const std::vector<std::string>& argv);
  absl::Status AwaitPort(const std::string& port_file, absl::Duration timeout);

  std::string dir_;
  std::string target_;
  ClientSecurity security_;
  std::vector<Process> processes_;
  std::atomic<bool> killed_{false};
  bool stopped_ = false;
};

}  // namespace tagi

#endif  // TAGI_CTL_LOCAL_CLUSTER_H_
