// Starts a real tagi-coordinator for integration tests on a port the OS
// picks (--listen 127.0.0.1:0 --port-file ...) and waits, polling with a
// deadline, until it has written that port: the returned address is then
// accepting connections.
#ifndef TAGI_TESTS_TESTING_COORDINATOR_PROCESS_H_
#define TAGI_TESTS_TESTING_COORDINATOR_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/testing/child_process.h"
#include "tests/testing/subprocess.h"

namespace tagi::testing {

struct StartedCoordinator {
  std::unique_ptr<ChildProcess> process;  // null only when fork failed
  std::string address;                    // "127.0.0.1:PORT"; empty when it did not start
  int port = 0;
  std::string error;  // why it did not start, with its stderr
  bool ok() const { return !address.empty(); }
};

struct CoordinatorLaunch {
  std::vector<std::string> flags;      // e.g. {"--world", "3"}
  std::string listen = "127.0.0.1:0";  // port 0: the OS picks one
  std::string name = "coordinator";    // logs: dir/<name>.out, .err; dir/<name>.port
  absl::Duration timeout = absl::Seconds(20);
  // A command the binary runs under, e.g. {"env", "LD_PRELOAD=...", ...}.
  std::vector<std::string> wrapper;
};

// Runs `binary` --listen <listen> --port-file dir/<name>.port <flags> and
// waits for the port file (or for the process to end).
StartedCoordinator StartCoordinator(const std::string& binary, const TempDir& dir,
                                    const CoordinatorLaunch& launch = {});

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and
// released), for a test that must know an address before its server runs.
int PickFreePort();

}  // namespace tagi::testing

#endif  // TAGI_TESTS_TESTING_COORDINATOR_PROCESS_H_
