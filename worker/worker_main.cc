// tagi-worker: one per GPU (or per CPU host). Joins the coordinator, trains
// the shards it is assigned, and waits for the next job.
//
//   tagi-worker --coord HOST:PORT [--device cpu|cuda:N] [--threads T] [--host ADDR]
//               [--metrics HOST:PORT [--metrics-port-file FILE]]
//               [--join-token-file F] [--tls-ca F [--tls-cert F --tls-key F]]
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/grpc_util.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/job_spec.h"
#include "common/signals.h"
#include "worker/agent.h"
#include "worker/collective/tcp/socket.h"
#include "worker/data/data_roots.h"
#include "worker/engine/blas.h"
#include "worker/engine/cuda/device.h"
#include "worker/metrics.h"

ABSL_FLAG(std::string, coord, "", "The coordinator's gRPC address, HOST:PORT.");
ABSL_FLAG(std::string, device, "cpu",
          "\"cpu\", or \"cuda:N\" to run the CUDA engine on GPU N (NCCL becomes the default "
          "backend of its jobs).");
ABSL_FLAG(int, threads, 1, "BLAS threads for the CPU engine.");
ABSL_FLAG(std::string, host, "",
          "Address this worker binds and advertises to its peers for the collective. Empty: "
          "the address of the interface that routes to --coord (127.0.0.1 for a coordinator "
          "on loopback).");
ABSL_FLAG(absl::Duration, collective_timeout, absl::Seconds(60),
          "A collective call that has not completed by then fails the attempt.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(30),
          "Time allowed to form the collective group of a job.");
ABSL_FLAG(std::string, join_token_file, "",
          "File holding the cluster join token (the coordinator's --join-token-file); sent as "
          "\"tagi-join-token\" metadata on every call to the coordinator.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA that signed the coordinator's certificate: talk TLS. Empty: plaintext.");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate for mutual TLS (with --tls-key).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(int, max_jobs, 0, "Exit after this many jobs (0: run until stopped).");
ABSL_FLAG(std::string, metrics, "",
          "Serve Prometheus metrics at http://HOST:PORT/metrics (port 0 picks a free one); "
          "off when empty.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "Write the chosen metrics port to this file once listening.");
ABSL_FLAG(std::vector<std::string>, data_root, tagi::data::DefaultDataRoots(),
          "Directories (comma-separated) the worker reads job data from; a job naming a file "
          "anywhere else fails with a message that says so and nothing about the file. The "
          "default: Debian's packaged data sets and the worker's own data directory.");

int main(int argc, char** argv) {
  tagi::engine::ReexecWithShortBlasSpin(argv);  // before anything else (blas.h)
  tagi::InstallTerminationHandler();
  absl::SetProgramUsageMessage(
      "a tagi-ddp worker.\n"
      "  tagi-worker --coord HOST:PORT [--device cpu|cuda:N] [--threads T] [--host ADDR]\n"
      "              [--metrics HOST:PORT [--metrics-port-file FILE]] [--data-root DIR,...]\n"
      "Run with --helpfull for every flag.");
  std::vector<char*> args = tagi::ParseFlags(argc, argv);
  if (args.size() != 1) {
    std::fprintf(stderr, "tagi-worker: unexpected argument \"%s\"; see --help\n", args[1]);
    return 2;
  }
  tagi::AgentOptions opt;
  opt.coordinator = absl::GetFlag(FLAGS_coord);
  opt.device = absl::GetFlag(FLAGS_device);
  opt.runner.threads = absl::GetFlag(FLAGS_threads);
  opt.runner.host = absl::GetFlag(FLAGS_host);
  opt.runner.collective_timeout = absl::GetFlag(FLAGS_collective_timeout);
  opt.runner.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  opt.runner.data_roots = absl::GetFlag(FLAGS_data_root);
  if (opt.runner.data_roots.empty()) {
    std::fprintf(stderr, "tagi-worker: --data-root needs at least one directory\n");
    return 2;
  }
  opt.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  char hostname[256] = {0};
  ::gethostname(hostname, sizeof(hostname) - 1);
  opt.hostname = hostname;
  if (!tagi::ValidHostPort(opt.coordinator)) {
    std::fprintf(stderr, "tagi-worker: --coord \"%s\" is not HOST:PORT\n",
                 opt.coordinator.c_str());
    return 2;
  }
  if (opt.runner.host.empty()) {
    // Peers on other hosts must reach this worker where the coordinator
    // does: advertise the interface that routes there.
    auto local = tagi::ring_internal::LocalAddressTowards(opt.coordinator);
    if (!local.ok()) {
      std::fprintf(stderr,
                   "tagi-worker: --host not given and the address towards --coord %s is "
                   "unknown (%s); pass --host ADDR\n",
                   opt.coordinator.c_str(), std::string(local.status().message()).c_str());
      return 2;
    }
    opt.runner.host = *local;
  }
  if (auto st = tagi::LoadClientTls(absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                                    absl::GetFlag(FLAGS_tls_key), opt.security);
      !st.ok()) {
    std::fprintf(stderr, "tagi-worker: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  if (const std::string f = absl::GetFlag(FLAGS_join_token_file); !f.empty()) {
    auto tokens = tagi::ReadTokenFile(f, "--join-token-file");
    if (!tokens.ok() || tokens->size() != 1) {
      std::fprintf(stderr, "tagi-worker: %s\n",
                   tokens.ok() ? absl::StrCat("--join-token-file ", f, " holds ", tokens->size(),
                                              " tokens; expected exactly one")
                                     .c_str()
                               : std::string(tokens.status().message()).c_str());
      return 2;
    }
    opt.security.metadata_key = tagi::kJoinTokenMetadataKey;
    opt.security.metadata_value = (*tokens)[0];
  }
  auto device = tagi::ParseDevice(opt.device);
  if (!device.ok()) {
    std::fprintf(stderr, "tagi-worker: --device: %s\n",
                 std::string(device.status().message()).c_str());
    return 2;
  }
  if (*device >= 0) {
    const tagi::engine::cuda::DeviceList gpus = tagi::engine::cuda::ListCudaDevices();
    if (static_cast<size_t>(*device) >= gpus.devices.size()) {
      std::fprintf(stderr, "tagi-worker: --device %s: %s\n", opt.device.c_str(),
                   gpus.devices.empty()
                       ? gpus.reason.c_str()
                       : absl::StrCat("this host has ", gpus.devices.size(), " GPU(s)").c_str());
      return 2;
    }
  }
  opt.runner.device = *device;
  if (opt.runner.threads < 1 || opt.runner.threads > 256) {
    std::fprintf(stderr, "tagi-worker: --threads must be in 1..256\n");
    return 2;
  }
  const std::string metrics_address = absl::GetFlag(FLAGS_metrics);
  const std::string metrics_port_file = absl::GetFlag(FLAGS_metrics_port_file);
  if (!metrics_address.empty() && !tagi::ValidHostPort(metrics_address)) {
    std::fprintf(stderr, "tagi-worker: --metrics \"%s\" is not HOST:PORT\n",
                 metrics_address.c_str());
    return 2;
  }
  if (metrics_address.empty() && !metrics_port_file.empty()) {
    std::fprintf(stderr, "tagi-worker: --metrics-port-file needs --metrics\n");
    return 2;
  }
  tagi::WorkerMetrics metrics;
  std::unique_ptr<tagi::MetricsEndpoint> endpoint;
  if (!metrics_address.empty()) {
    auto started = tagi::MetricsEndpoint::Start(metrics_address, metrics);
    if (!started.ok()) {
      std::fprintf(stderr, "tagi-worker: --metrics: %s\n",
                   std::string(started.status().message()).c_str());
      return 2;
    }
    endpoint = *std::move(started);
    opt.runner.metrics = &metrics;
    if (!metrics_port_file.empty()) {
      if (auto st = tagi::WriteFileAtomic(metrics_port_file, absl::StrCat(endpoint->port(), "\n"));
          !st.ok()) {
        std::fprintf(stderr, "tagi-worker: --metrics-port-file: %s\n",
                     std::string(st.message()).c_str());
        return 2;
      }
    }
    std::fprintf(stderr, "tagi-worker: metrics on %s (port %d)\n", metrics_address.c_str(),
                 endpoint->port());
  }
  // Process-wide (see blas.h): set here, once, before any job runs.
  tagi::engine::SetBlasThreads(opt.runner.threads);
  tagi::RealClock clock;
  tagi::Agent agent(opt, clock);
  std::thread signals([&agent] {
    // Ends with the process: the agent's Run() returns after Stop().
    if (tagi::WaitForTerminationSignal(absl::InfiniteDuration()) != 0) agent.Stop();
  });
  signals.detach();
  return agent.Run();
}
