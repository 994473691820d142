// tagi-coordinator: accepts jobs, forms groups of workers, relays the
// collective's bootstrap data and stores final models.
//
//   tagi-coordinator --world 8 --listen 0.0.0.0:7070 [--state-dir DIR]
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <fstream>
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
#include "coordinator/services.h"

ABSL_FLAG(int, world, 1, "Default (and largest) number of workers per job.");
ABSL_FLAG(std::string, listen, "0.0.0.0:7070",
          "gRPC address for workers and clients (host:port; port 0 picks a free one).");
ABSL_FLAG(std::string, state_dir, "", "Directory for final models (kept in memory when empty).");
ABSL_FLAG(std::string, port_file, "", "Write the chosen gRPC port to this file once listening.");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(10),
          "A worker not heard from for this long is gone (its job fails).");

namespace tagi::coordinator {
namespace {

struct Options {
  int world = 1;
  std::string listen;
  std::string port_file;
  CoordinatorOptions coordinator;
};

int Run(const Options& opt) {
  RealClock clock;
  Coordinator coordinator(opt.coordinator, clock);
  JobsService jobs(coordinator);
  ClusterService cluster(coordinator);

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
  if (!opt.port_file.empty()) {
    std::ofstream(opt.port_file) << port << "\n";
  }
  std::fprintf(stderr, "tagi-coordinator: listening on %s (port %d), world %d%s\n",
               opt.listen.c_str(), port, opt.world,
               opt.coordinator.state_dir.empty()
                   ? ""
                   : absl::StrFormat(", state in %s", opt.coordinator.state_dir).c_str());

  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop.load()) {
      coordinator.Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  int sig = 0;
  while ((sig = WaitForTerminationSignal(absl::Seconds(1))) == 0) {
  }
  std::fprintf(stderr, "tagi-coordinator: signal %d, shutting down\n", sig);
  stop = true;
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
      "  tagi-coordinator --world N --listen HOST:PORT [--state-dir DIR]\n"
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
  opt.coordinator.world = opt.world;
  opt.coordinator.state_dir = absl::GetFlag(FLAGS_state_dir);
  opt.coordinator.membership.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  if (!tagi::ValidHostPort(opt.listen)) {
    std::fprintf(stderr, "tagi-coordinator: --listen \"%s\" is not HOST:PORT\n",
                 opt.listen.c_str());
    return 2;
  }
  if (opt.world < 1 || opt.world > 4096) {
    std::fprintf(stderr, "tagi-coordinator: --world must be in 1..4096 (got %d)\n", opt.world);
    return 2;
  }
  if (opt.coordinator.membership.worker_timeout <= absl::ZeroDuration()) {
    std::fprintf(stderr, "tagi-coordinator: --worker_timeout must be positive\n");
    return 2;
  }
  return tagi::coordinator::Run(opt);
}
