// tagi-coordinator: accepts jobs, forms groups of workers, relays the
// collective's bootstrap data and stores final models.
//
//   tagi-coordinator --world 8 --listen 0.0.0.0:7070 [--state-dir DIR]
//                    [--http 0.0.0.0:8080]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/grpc_util.h"
#include "common/signals.h"
#include "coordinator/coordinator.h"
#include "coordinator/metrics.h"
#include "coordinator/rest_gateway.h"
#include "coordinator/services.h"

ABSL_FLAG(int, world, 1, "Default (and largest) number of workers per job.");
ABSL_FLAG(std::string, listen, "0.0.0.0:7070",
          "gRPC address for workers and clients (host:port; port 0 picks a free one).");
ABSL_FLAG(std::string, state_dir, "",
          "Directory for jobs, snapshots and final models; a coordinator restarted on the same "
          "directory resumes its running jobs. Empty: models in memory, snapshots in a "
          "temporary directory, nothing survives a restart.");
ABSL_FLAG(std::string, port_file, "", "Write the chosen gRPC port to this file once listening.");
ABSL_FLAG(std::string, http, "",
          "REST/JSON address (host:port; port 0 picks a free one); empty: no HTTP server.");
ABSL_FLAG(std::string, http_port_file, "",
          "Write the chosen HTTP port to this file once listening.");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1),
          "How often workers send a heartbeat on their session stream.");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(3),
          "A worker not heard from for this long has failed: its generation ends and the job "
          "resumes from its newest snapshot on the survivors and a spare.");
ABSL_FLAG(int, max_restarts, 100, "Failed generations after which a job FAILS.");
ABSL_FLAG(int, keep_snapshots, 3, "Snapshots kept per job (the newest ones).");

namespace tagi::coordinator {
namespace {

struct Options {
  int world = 1;
  std::string listen;
  std::string port_file;
  std::string http;
  std::string http_port_file;
  CoordinatorOptions coordinator;
};

// OK when final models can be written under the state dir: the nearest
// existing ancestor of <state_dir>/models is a writable directory.
absl::Status StateDirWritable(const std::string& state_dir) {
  if (state_dir.empty()) return absl::OkStatus();
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(state_dir, ec) / "models";
  while (!std::filesystem::exists(dir, ec) && dir.has_parent_path() && dir != dir.parent_path()) {
    dir = dir.parent_path();
  }
  if (!std::filesystem::is_directory(dir, ec) || ::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::UnavailableError(
        absl::StrFormat("the state dir %s cannot be written (%s is not a writable directory)",
                        state_dir, dir.string()));
  }
  return absl::OkStatus();
}

// Writes "PORT\n" (readers wait for the newline).
void WritePortFile(const std::string& path, int port) {
  if (!path.empty()) std::ofstream(path) << port << "\n";
}

// Binds the REST gateway to --http, serves, and writes --http-port-file;
// false (with the reason on stderr) when it cannot listen.
bool StartRest(const Options& opt, RestGateway& http) {
  auto port = http.Bind(opt.http);
  if (!port.ok()) {
    std::fprintf(stderr, "tagi-coordinator: --http: %s\n",
                 std::string(port.status().message()).c_str());
    return false;
  }
  http.Start();
  WritePortFile(opt.http_port_file, *port);
  std::fprintf(stderr, "tagi-coordinator: REST on %s (port %d)\n", opt.http.c_str(), *port);
  return true;
}

int Run(const Options& opt) {
  RealClock clock;
  Coordinator coordinator(opt.coordinator, clock);
  JobsService jobs(coordinator);
  ClusterService cluster(coordinator, opt.coordinator.heartbeat);

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(opt.listen, grpc::InsecureServerCredentials(), &port);
  // gRPC sets SO_REUSEPORT by default: a busy port would then be shared
  // silently. Refuse instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  builder.RegisterService(&jobs);
  builder.RegisterService(&cluster);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr,
                 "tagi-coordinator: cannot listen on %s (is the address valid and the port "
                 "free?)\n",
                 opt.listen.c_str());
    return 1;
  }
  std::atomic<bool> serving{true};  // false once shutdown begins

  CoordinatorMetrics metrics(coordinator, clock);
  std::optional<RestGateway> http;
  if (!opt.http.empty()) {
    http.emplace(
        coordinator, [&metrics] { return metrics.Scrape(); },
        [&serving, &opt]() -> absl::Status {
          if (!serving.load()) return absl::UnavailableError("the coordinator is shutting down");
          return StateDirWritable(opt.coordinator.state_dir);
        });
    if (!StartRest(opt, *http)) {
      server->Shutdown(std::chrono::system_clock::now());
      return 1;
    }
  }
  // Last: a reader of the gRPC port file finds the HTTP server up too.
  WritePortFile(opt.port_file, port);
  std::fprintf(stderr, "tagi-coordinator: listening on %s (port %d), world %d%s\n",
               opt.listen.c_str(), port, opt.world,
               opt.coordinator.state_dir.empty()
                   ? ""
                   : absl::StrFormat(", state in %s", opt.coordinator.state_dir).c_str());

  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop.load()) {
      coordinator.Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  int sig = 0;
  while ((sig = WaitForTerminationSignal(absl::Seconds(1))) == 0) {
  }
  std::fprintf(stderr, "tagi-coordinator: signal %d, shutting down\n", sig);
  stop = true;
  serving = false;
  if (http.has_value()) http->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  ticker.join();
  return 0;
}

}  // namespace
}  // namespace tagi::coordinator

int main(int argc, char** argv) {
  tagi::InstallTerminationHandler();
  absl::SetProgramUsageMessage(
      "the tagi-ddp coordinator.\n"
      "  tagi-coordinator --world N --listen HOST:PORT [--state-dir DIR] [--http HOST:PORT]\n"
      "Run with --helpfull for every flag.");
  std::vector<char*> args = tagi::ParseFlags(argc, argv);
  if (args.size() != 1) {
    std::fprintf(stderr, "tagi-coordinator: unexpected argument \"%s\"; see --help\n", args[1]);
    return 2;
  }
  tagi::coordinator::Options opt;
  opt.world = absl::GetFlag(FLAGS_world);
  opt.listen = absl::GetFlag(FLAGS_listen);
  opt.port_file = absl::GetFlag(FLAGS_port_file);
  opt.http = absl::GetFlag(FLAGS_http);
  opt.http_port_file = absl::GetFlag(FLAGS_http_port_file);
  opt.coordinator.world = opt.world;
  opt.coordinator.state_dir = absl::GetFlag(FLAGS_state_dir);
  opt.coordinator.heartbeat = absl::GetFlag(FLAGS_heartbeat_interval);
  opt.coordinator.membership.worker_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  opt.coordinator.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  const int keep = absl::GetFlag(FLAGS_keep_snapshots);
  if (!tagi::ValidHostPort(opt.listen)) {
    std::fprintf(stderr, "tagi-coordinator: --listen \"%s\" is not HOST:PORT\n",
                 opt.listen.c_str());
    return 2;
  }
  if (!opt.http.empty() && !tagi::ValidHostPort(opt.http)) {
    std::fprintf(stderr, "tagi-coordinator: --http \"%s\" is not HOST:PORT\n", opt.http.c_str());
    return 2;
  }
  if (opt.http.empty() && !opt.http_port_file.empty()) {
    std::fprintf(stderr, "tagi-coordinator: --http-port-file needs --http\n");
    return 2;
  }
  if (opt.world < 1 || opt.world > 4096) {
    std::fprintf(stderr, "tagi-coordinator: --world must be in 1..4096 (got %d)\n", opt.world);
    return 2;
  }
  if (opt.coordinator.heartbeat < absl::Milliseconds(10) ||
      opt.coordinator.membership.worker_timeout <= opt.coordinator.heartbeat) {
    std::fprintf(stderr,
                 "tagi-coordinator: --heartbeat-interval must be at least 10ms and "
                 "--heartbeat-timeout longer than it (got %s and %s)\n",
                 absl::FormatDuration(opt.coordinator.heartbeat).c_str(),
                 absl::FormatDuration(opt.coordinator.membership.worker_timeout).c_str());
    return 2;
  }
  if (opt.coordinator.max_restarts < 0 || keep < 1 || keep > 1000) {
    std::fprintf(stderr,
                 "tagi-coordinator: --max-restarts must be >= 0 and --keep-snapshots in 1..1000\n");
    return 2;
  }
  opt.coordinator.keep_snapshots = static_cast<size_t>(keep);
  return tagi::coordinator::Run(opt);
}
