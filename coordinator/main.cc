// tagi-coordinator: accepts jobs, forms groups of workers, relays the
// collective's bootstrap data and stores final models.
//
//   tagi-coordinator --world 8 --listen 0.0.0.0:7070 [--state-dir DIR]
//                    [--http 0.0.0.0:8080] --tls-cert F --tls-key F [--tls-client-ca F]
//                    [--join-token-file F] [--api-tokens-file F]
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
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
#include "common/auth.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/grpc_util.h"
#include "common/signals.h"
#include "coordinator/coordinator.h"
#include "coordinator/metrics.h"
#include "coordinator/rest_gateway.h"
#include "coordinator/services.h"

ABSL_FLAG(int, world, 1, "Default (and largest) number of workers per job.");
ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "gRPC address for workers and clients (host:port; port 0 picks a free one). A "
          "non-loopback address needs TLS (--tls-cert, --tls-key) or --insecure.");
ABSL_FLAG(std::string, state_dir, "",
          "Directory for jobs, snapshots and final models; a coordinator restarted on the same "
          "directory resumes its running jobs. Empty: models in memory, snapshots in a "
          "temporary directory, nothing survives a restart.");
ABSL_FLAG(std::string, port_file, "", "Write the chosen gRPC port to this file once listening.");
ABSL_FLAG(std::string, http, "",
          "REST/JSON address (host:port; port 0 picks a free one); empty: no HTTP server.");
ABSL_FLAG(std::string, probe_http, "",
          "HOST:PORT of a second HTTP listener that serves /healthz, /readyz and /metrics only, "
          "with its own small connection table (64, 16 per client, 2 s requests): API clients "
          "cannot exhaust it, so probes and scrapes answer even while --http is flooded. Empty: "
          "none.");
ABSL_FLAG(std::string, probe_http_port_file, "",
          "Write the chosen --probe-http port to this file once listening.");
ABSL_FLAG(std::string, http_port_file, "",
          "Write the chosen HTTP port to this file once listening.");
ABSL_FLAG(int, http_max_connections, 1024,
          "Open connections the REST gateway holds at most; beyond, new ones are closed at once.");
ABSL_FLAG(int, http_max_connections_per_client, 64,
          "Open REST connections one client address may hold; beyond, its new ones are closed "
          "at once.");
ABSL_FLAG(absl::Duration, http_request_timeout, absl::Seconds(10),
          "A REST request (headers and body) must arrive whole within this time of its "
          "connection's accept; the connection is shut otherwise. A connection making no "
          "progress either way for this long is closed too.");
ABSL_FLAG(int, http_max_header_bytes, 32 << 10,
          "Bytes of a REST request's line and headers together; larger requests are 431.");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1),
          "How often workers send a heartbeat on their session stream.");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(3),
          "A worker not heard from for this long has failed: its generation ends and the job "
          "resumes from its newest snapshot on the survivors and a spare.");
ABSL_FLAG(int, max_restarts, 100, "Failed generations after which a job FAILS.");
ABSL_FLAG(absl::Duration, elastic_settle, absl::Seconds(2),
          "An elastic job that could start or resume with fewer ranks than its maximum waits "
          "this long (from when it became pending) for more idle workers.");
ABSL_FLAG(std::string, join_token_file, "",
          "File holding the cluster join token: every Cluster RPC (workers) must then carry it "
          "as \"tagi-join-token\" metadata. Empty: workers join without a token.");
ABSL_FLAG(std::string, api_tokens_file, "",
          "File of API tokens, one per line (blank lines and # comments ignored): every Jobs "
          "RPC and every /v1 REST route then needs \"authorization: Bearer <token>\". Empty: "
          "the API is open.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve gRPC (and the REST gateway) over TLS. Needs --tls-key.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: gRPC clients must present a certificate it signed (mutual TLS).");
ABSL_FLAG(bool, insecure, false,
          "Allow plaintext (no TLS) on a non-loopback --listen or --http address.");
ABSL_FLAG(int, keep_snapshots, 3, "Snapshots kept per job (the newest ones).");
ABSL_FLAG(int, retain_ended_jobs, 1000,
          "Ended jobs (succeeded, failed, cancelled) kept, the most recently ended; older ones "
          "are forgotten with their model and snapshots. 0 forgets a job once it ended.");
ABSL_FLAG(absl::Duration, retain_ended_for, absl::Hours(24 * 7),
          "How long an ended job is kept (with its model and snapshots) after it ended.");
ABSL_FLAG(int, max_streams_per_client, 256,
          "Concurrent streaming calls of the API (watches, model downloads) one client address "
          "may hold; more are refused with RESOURCE_EXHAUSTED. Workers have budgets of their "
          "own (--max-streams-per-worker), which API clients cannot use.");
ABSL_FLAG(int, max_api_streams, 1024,
          "Concurrent streaming calls of the API from all clients together.");
ABSL_FLAG(int, max_streams_per_worker, 16,
          "Concurrent streams (session, snapshot and model transfers) one worker id may hold.");
ABSL_FLAG(int, max_worker_streams, 8192,
          "Concurrent worker streams from all workers together.");

namespace tagi::coordinator {
namespace {

struct Options {
  int world = 1;
  std::string listen;
  std::string port_file;
  std::string http;
  std::string http_port_file;
  std::string probe_http;
  std::string probe_http_port_file;
  CoordinatorOptions coordinator;
  TokenSet join_tokens;
  TokenSet api_tokens;
  int max_streams_per_client = 256;
  int max_api_streams = 1024;
  int max_streams_per_worker = 16;
  int max_worker_streams = 8192;
  // PEM contents; empty cert: plaintext.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  std::string tls_cert_file;  // for the REST gateway, which reads files
  std::string tls_key_file;
  HttpServerOptions http_limits;  // connections, sizes, deadlines (not TLS)
};

// The server credentials --tls-* ask for.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const Options& opt) {
  if (opt.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      opt.tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = opt.tls_client_ca;
  ssl.pem_key_cert_pairs.push_back({opt.tls_key, opt.tls_cert});
  return grpc::SslServerCredentials(ssl);
}

// Writes "PORT\n" (readers wait for the newline).
void WritePortFile(const std::string& path, int port) {
  if (!path.empty()) std::ofstream(path) << port << "\n";
}

// Binds a gateway to `address` (the flag `flag`), serves, and writes
// `port_file`; false (with the reason on stderr) when it cannot listen.
bool StartRest(const char* flag, const std::string& address, const std::string& port_file,
               RestGateway& http) {
  auto port = http.Bind(address);
  if (!port.ok()) {
    std::fprintf(stderr, "tagi-coordinator: %s: %s\n", flag,
                 std::string(port.status().message()).c_str());
    return false;
  }
  if (auto st = http.Start(); !st.ok()) {
    std::fprintf(stderr, "tagi-coordinator: %s: %s\n", flag, std::string(st.message()).c_str());
    return false;
  }
  WritePortFile(port_file, *port);
  std::fprintf(stderr, "tagi-coordinator: %s on %s (port %d)\n",
               std::string(flag) == "--http" ? "REST" : "probes and metrics", address.c_str(),
               *port);
  return true;
}

// Reads the token and TLS files the flags name, and refuses, on a
// non-loopback address without --insecure, plaintext and workers that
// nothing authenticates.
absl::Status LoadSecurity(Options& opt) {
  if (const std::string f = absl::GetFlag(FLAGS_join_token_file); !f.empty()) {
    auto tokens = ReadTokenFile(f, "--join-token-file");
    if (!tokens.ok()) return tokens.status();
    if (tokens->size() != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--join-token-file %s holds %d tokens; expected exactly one", f, tokens->size()));
    }
    opt.join_tokens = TokenSet(*std::move(tokens));
  }
  if (const std::string f = absl::GetFlag(FLAGS_api_tokens_file); !f.empty()) {
    auto tokens = ReadTokenFile(f, "--api-tokens-file");
    if (!tokens.ok()) return tokens.status();
    opt.api_tokens = TokenSet(*std::move(tokens));
  }
  opt.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  opt.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  const std::string client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  if (opt.tls_cert_file.empty() != opt.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!client_ca.empty() && opt.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  auto read = [](const std::string& file, const char* flag, std::string& out) {
    if (file.empty()) return absl::OkStatus();
    auto pem = ReadPemFile(file, flag);
    if (!pem.ok()) return pem.status();
    out = *std::move(pem);
    return absl::OkStatus();
  };
  if (auto st = read(opt.tls_cert_file, "--tls-cert", opt.tls_cert); !st.ok()) return st;
  if (auto st = read(opt.tls_key_file, "--tls-key", opt.tls_key); !st.ok()) return st;
  if (auto st = read(client_ca, "--tls-client-ca", opt.tls_client_ca); !st.ok()) return st;
  if (absl::GetFlag(FLAGS_insecure)) return absl::OkStatus();
  for (const std::string* address : {&opt.listen, &opt.http, &opt.probe_http}) {
    if (opt.tls_cert.empty() && !address->empty() && !IsLoopbackAddress(*address)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "refusing to serve plaintext on the non-loopback address %s: tokens and jobs would "
          "cross the network unencrypted. Serve TLS (--tls-cert F --tls-key F), listen on "
          "127.0.0.1, or pass --insecure to accept the risk",
          *address));
    }
  }
  // Workers are told jobs (data paths, networks) and hold ranks: off
  // loopback, only those holding the join token or a client certificate.
  if (!IsLoopbackAddress(opt.listen) && !opt.join_tokens.required() && client_ca.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "refusing to let anyone who reaches %s register as a worker (and be sent jobs). Give "
        "workers a shared secret (--join-token-file F) or certificates (--tls-client-ca F), "
        "listen on 127.0.0.1, or pass --insecure to accept the risk",
        opt.listen));
  }
  return absl::OkStatus();
}

int Run(const Options& opt) {
  RealClock clock;
  Coordinator coordinator(opt.coordinator, clock);
  JobsService jobs(coordinator, opt.api_tokens);
  ClusterService cluster(coordinator, opt.coordinator.heartbeat, opt.join_tokens);
  // Separate budgets: API clients can never take the streams training needs.
  StreamLimiter api_streams(StreamLimits{.per_key = opt.max_streams_per_client,
                                         .total = opt.max_api_streams,
                                         .noun = "client",
                                         .flags = "--max-streams-per-client, --max-api-streams"});
  StreamLimiter worker_streams(
      StreamLimits{.per_key = opt.max_streams_per_worker,
                   .total = opt.max_worker_streams,
                   .noun = "worker",
                   .flags = "--max-streams-per-worker, --max-worker-streams"});
  jobs.set_stream_limiter(&api_streams);
  cluster.set_stream_limiter(&worker_streams);
  cluster.set_max_sessions(static_cast<size_t>(opt.max_worker_streams));
  RefusalLog refusals(clock);  // one line per client host and reason per minute
  jobs.set_refusal_log(&refusals);
  cluster.set_refusal_log(&refusals);

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(opt.listen, ServerCredentials(opt), &port);
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
                 "tagi-coordinator: cannot listen on %s (is the address valid, the port free%s?)\n",
                 opt.listen.c_str(),
                 opt.tls_cert.empty() ? "" : " and --tls-cert/--tls-key a matching pair");
    return 1;
  }
  std::atomic<bool> serving{true};  // false once shutdown begins

  CoordinatorMetrics metrics(coordinator, clock);
  std::optional<RestGateway> http;
  if (!opt.http.empty()) {
    RestOptions rest;
    rest.http = opt.http_limits;
    rest.http.tls_cert_file = opt.tls_cert_file;
    rest.http.tls_key_file = opt.tls_key_file;
    rest.api_tokens = opt.api_tokens;
    rest.refusals = &refusals;
    http.emplace(
        coordinator,
        [&metrics, &http] {
          return metrics.Scrape() + HttpStatsText(http->stats(), "tagi_coordinator_http");
        },
        [&serving, &coordinator]() -> absl::Status {
          if (!serving.load()) return absl::UnavailableError("the coordinator is shutting down");
          // A state dir that cannot be written (full, read-only, I/O errors)
          // is not ready: jobs wait for it.
          return coordinator.StateHealth();
        },
        rest, clock);
    if (!StartRest("--http", opt.http, opt.http_port_file, *http)) {
      server->Shutdown(std::chrono::system_clock::now());
      return 1;
    }
  }
  std::optional<RestGateway> probes;
  if (!opt.probe_http.empty()) {
    RestOptions rest;
    rest.http.max_connections = 64;
    rest.http.max_connections_per_client = 16;
    rest.http.request_deadline = absl::Seconds(2);
    rest.http.idle_timeout = absl::Seconds(2);
    rest.http.threads = 1;
    rest.http.tls_cert_file = opt.tls_cert_file;
    rest.http.tls_key_file = opt.tls_key_file;
    rest.refusals = &refusals;
    rest.probes_only = true;
    probes.emplace(
        coordinator,
        [&metrics, &http] {
          return metrics.Scrape() +
                 (http.has_value() ? HttpStatsText(http->stats(), "tagi_coordinator_http") : "");
        },
        [&serving, &coordinator]() -> absl::Status {
          if (!serving.load()) return absl::UnavailableError("the coordinator is shutting down");
          return coordinator.StateHealth();
        },
        rest, clock);
    if (!StartRest("--probe-http", opt.probe_http, opt.probe_http_port_file, *probes)) {
      server->Shutdown(std::chrono::system_clock::now());
      return 1;
    }
  }
  // Last: a reader of the gRPC port file finds the HTTP server up too.
  WritePortFile(opt.port_file, port);
  std::fprintf(stderr, "tagi-coordinator: listening on %s (port %d, %s%s%s), world %d%s\n",
               opt.listen.c_str(), port,
               opt.tls_cert.empty() ? "plaintext"
               : opt.tls_client_ca.empty() ? "TLS"
                                           : "mutual TLS",
               opt.join_tokens.required() ? ", join token required" : "",
               opt.api_tokens.required() ? ", API tokens required" : "", opt.world,
               opt.coordinator.state_dir.empty()
                   ? ""
                   : absl::StrFormat(", state in %s", opt.coordinator.state_dir).c_str());

  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop.load()) {
      coordinator.Tick();
      clock.SleepFor(absl::Milliseconds(100));
    }
  });
  int sig = 0;
  while ((sig = WaitForTerminationSignal(absl::Seconds(1))) == 0) {
  }
  std::fprintf(stderr, "tagi-coordinator: signal %d, shutting down\n", sig);
  stop = true;
  serving = false;
  if (http.has_value()) http->Stop();
  if (probes.has_value()) probes->Stop();
  // Ends the session streams and answers the long polls first: the server's
  // shutdown then has no asynchronous call left to wait for.
  cluster.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  ticker.join();
  return 0;
}

}  // namespace
}  // namespace tagi::coordinator

// Every client connection takes a descriptor: the soft limit (often 1,024)
// goes up to the hard one, so that the connection limits, not EMFILE, bound
// what clients can hold.
static void RaiseOpenFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

int main(int argc, char** argv) {
  RaiseOpenFileLimit();
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
  opt.probe_http = absl::GetFlag(FLAGS_probe_http);
  opt.probe_http_port_file = absl::GetFlag(FLAGS_probe_http_port_file);
  opt.coordinator.world = opt.world;
  opt.coordinator.state_dir = absl::GetFlag(FLAGS_state_dir);
  opt.coordinator.heartbeat = absl::GetFlag(FLAGS_heartbeat_interval);
  opt.coordinator.membership.worker_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  opt.coordinator.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  opt.coordinator.membership.elastic_settle = absl::GetFlag(FLAGS_elastic_settle);
  opt.max_streams_per_client = absl::GetFlag(FLAGS_max_streams_per_client);
  opt.max_api_streams = absl::GetFlag(FLAGS_max_api_streams);
  opt.max_streams_per_worker = absl::GetFlag(FLAGS_max_streams_per_worker);
  opt.max_worker_streams = absl::GetFlag(FLAGS_max_worker_streams);
  if (opt.max_streams_per_client < 1 || opt.max_api_streams < 1 ||
      opt.max_streams_per_worker < 4 || opt.max_worker_streams < 4) {
    std::fprintf(stderr,
                 "tagi-coordinator: --max-streams-per-client and --max-api-streams must be at "
                 "least 1, --max-streams-per-worker and --max-worker-streams at least 4 (a "
                 "worker holds its session and up to three transfers)\n");
    return 2;
  }
  opt.http_limits.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  opt.http_limits.max_connections_per_client =
      absl::GetFlag(FLAGS_http_max_connections_per_client);
  opt.http_limits.request_deadline = absl::GetFlag(FLAGS_http_request_timeout);
  opt.http_limits.idle_timeout = opt.http_limits.request_deadline;
  const int header_bytes = absl::GetFlag(FLAGS_http_max_header_bytes);
  if (opt.http_limits.max_connections < 1 || opt.http_limits.max_connections_per_client < 1 ||
      opt.http_limits.request_deadline < absl::Seconds(1) || header_bytes < 1024) {
    std::fprintf(stderr,
                 "tagi-coordinator: --http-max-connections and --http-max-connections-per-client "
                 "must be at least 1, --http-request-timeout at least 1s and "
                 "--http-max-header-bytes at least 1024\n");
    return 2;
  }
  opt.http_limits.max_header_bytes = static_cast<size_t>(header_bytes);
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
  if (!opt.probe_http.empty() && !tagi::ValidHostPort(opt.probe_http)) {
    std::fprintf(stderr, "tagi-coordinator: --probe-http \"%s\" is not HOST:PORT\n",
                 opt.probe_http.c_str());
    return 2;
  }
  if (opt.probe_http.empty() && !opt.probe_http_port_file.empty()) {
    std::fprintf(stderr, "tagi-coordinator: --probe-http-port-file needs --probe-http\n");
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
  if (opt.coordinator.membership.elastic_settle < absl::ZeroDuration() ||
      opt.coordinator.membership.elastic_settle > absl::Minutes(10)) {
    std::fprintf(stderr, "tagi-coordinator: --elastic-settle must be in 0..10m (got %s)\n",
                 absl::FormatDuration(opt.coordinator.membership.elastic_settle).c_str());
    return 2;
  }
  if (opt.coordinator.max_restarts < 0 || keep < 1 || keep > 1000) {
    std::fprintf(stderr,
                 "tagi-coordinator: --max-restarts must be >= 0 and --keep-snapshots in 1..1000\n");
    return 2;
  }
  opt.coordinator.keep_snapshots = static_cast<size_t>(keep);
  const int retain = absl::GetFlag(FLAGS_retain_ended_jobs);
  const absl::Duration retain_for = absl::GetFlag(FLAGS_retain_ended_for);
  if (retain < 0 || retain_for < absl::ZeroDuration()) {
    std::fprintf(stderr,
                 "tagi-coordinator: --retain-ended-jobs and --retain-ended-for must not be "
                 "negative (got %d and %s)\n",
                 retain, absl::FormatDuration(retain_for).c_str());
    return 2;
  }
  opt.coordinator.retention.max_ended_jobs = static_cast<size_t>(retain);
  opt.coordinator.retention.max_ended_age = retain_for;
  if (auto st = tagi::coordinator::LoadSecurity(opt); !st.ok()) {
    std::fprintf(stderr, "tagi-coordinator: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  return tagi::coordinator::Run(opt);
}
