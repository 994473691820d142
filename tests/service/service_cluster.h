// The fixture of the service's integration tests: a private TempDir, a real
// tagi-coordinator on an OS-chosen loopback port, real tagi-worker processes
// and tagictl runs against them. Every process is a ChildProcess owned by
// the fixture, so each one is killed and reaped when the test ends, even
// when it fails; a failed test prints the logs of every process it started.
// Waits poll with deadlines; nothing sleeps for correctness.
#ifndef TAGI_TESTS_SERVICE_SERVICE_CLUSTER_H_
#define TAGI_TESTS_SERVICE_SERVICE_CLUSTER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tagi/v1/jobs.pb.h"
#include "tests/testing/child_process.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"

namespace tagi::testing {

std::string BinPath(const std::string& name);  // <build>/bin/<name>
bool HaveFashionMnist();

// A Fashion-MNIST classification job: 784-<hidden>-ReLU-11, batch 16.
struct FmnistJob {
  std::string name = "fmnist";
  int world = 2;
  int epochs = 1;
  int hidden = 64;
  int train_limit = 3000;
  int test_limit = 1000;
};
std::string FmnistJobJson(const FmnistJob& job);

// The paper's cubic regression on generated data (no files): 1-<hidden>-1.
struct ToyJob {
  std::string name = "toy";
  int world = 1;
  int epochs = 5;
  int train_size = 200;
  int test_size = 100;
};
std::string ToyJobJson(const ToyJob& job);

// One row of `tagictl workers`.
struct WorkerRow {
  std::string id;
  std::string state;
  std::string job;
};

class ServiceTest : public ::testing::Test {
 protected:
  void TearDown() override;

  // Starts the coordinator on `listen` (fatal failure when it does not
  // come up); address() is then where it listens.
  // `wrapper`: a command it runs under (CoordinatorLaunch::wrapper). A
  // coordinator started before is stopped first.
  void StartCoordinator(int world, std::vector<std::string> flags = {},
                        const std::string& listen = "127.0.0.1:0",
                        std::vector<std::string> wrapper = {});
  // Starts a worker of the coordinator at address() (or `coord`).
  ChildProcess& StartWorker(std::vector<std::string> flags = {}, std::string coord = "",
                            std::vector<std::string> wrapper = {});
  const std::string& address() const { return address_; }
  ChildProcess& coordinator() { return *coordinator_; }

  // tagictl --coord address() <ctl_flags_> <args>.
  ProcessResult Ctl(const std::vector<std::string>& args,
                    absl::Duration timeout = absl::Seconds(60));
  // tagictl --coord address() <ctl_flags_> <args> in the background (stopped
  // with the workers at the end of the test).
  ChildProcess& StartCtl(const std::vector<std::string>& args);
  // Writes a job file into the temp dir and returns its path.
  std::string WriteJob(const std::string& name, const std::string& json);
  // `tagictl submit FILE`; the job id, or "" after a failed submission
  // (with a non-fatal failure).
  std::string Submit(const std::string& job_file);
  // The job from `tagictl status ID --json`; nullopt (with a failure) when
  // tagictl failed or printed something that is not a Job.
  std::optional<tagi::v1::Job> GetJob(const std::string& id);
  // Polls GetJob until `done` holds; returns the last job seen.
  std::optional<tagi::v1::Job> WaitForJob(const std::string& id,
                                          const std::function<bool(const tagi::v1::Job&)>& done,
                                          absl::Duration timeout);
  // The rows of `tagictl workers` (empty, with a failure, when it failed).
  std::vector<WorkerRow> Workers();
  // Polls `tagictl workers` until exactly `n` workers are listed and all of
  // them are in `state`.
  bool WaitForWorkers(size_t n, const std::string& state, absl::Duration timeout);

  TempDir dir_;  // declared first: outlives the processes that write into it
  // Flags every Ctl() run carries after --coord (tokens, TLS).
  std::vector<std::string> ctl_flags_;

 private:
  std::string address_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

}  // namespace tagi::testing

#endif  // TAGI_TESTS_SERVICE_SERVICE_CLUSTER_H_
