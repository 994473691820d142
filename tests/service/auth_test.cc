// Security through the real binaries: API tokens and the cluster join token
// (refused calls change nothing), TLS and mutual TLS for gRPC (tagictl and
// workers connect with the CA; plaintext clients are refused), HTTPS and
// bearer tokens on the REST gateway, and the startup checks of the flags.
// Certificates come from a throwaway CA made with the openssl CLI in the
// test's temp dir; the TLS tests skip with a message without openssl.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tagi/v1/cluster.grpc.pb.h"
#include "tests/service/service_cluster.h"
#include "tests/testing/worker_call.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kApiToken[] = "api-token-for-alice-0123456789";
constexpr char kJoinToken[] = "join-token-0123456789abcdef";

bool IsTerminalForTest(const tagi::v1::Job& j) {
  return j.state() == tagi::v1::SUCCEEDED || j.state() == tagi::v1::FAILED ||
         j.state() == tagi::v1::CANCELLED;
}

bool HaveOpenssl() { return std::system("openssl version >/dev/null 2>&1") == 0; }

class AuthTest : public ServiceTest {
 protected:
  // Writes the token files: api.tokens (with a comment, a blank line and a
  // second user's token), join.token, and wrong.token.
  void WriteTokens() {
    api_file_ = dir_.Write("api.tokens", absl::StrCat("# users\n\nbob-token\n", kApiToken, "\n"));
    join_file_ = dir_.Write("join.token", absl::StrCat(kJoinToken, "\n"));
    wrong_file_ = dir_.Write("wrong.token", "not-the-token\n");
  }

  // A CA, a server certificate for 127.0.0.1/localhost and a client
  // certificate, all under dir_/pki. False (with the output) on failure.
  bool MakeCertificates() {
    const std::string d = dir_.path() + "/pki";
    const std::string script = absl::StrCat(
        "set -e; mkdir -p ", d, "; cd ", d,
        "; K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'"
        "; openssl req -x509 $K -keyout ca.key -out ca.pem -days 1 -subj /CN=tagi-test-ca"
        "; openssl req $K -keyout server.key -out server.csr -subj /CN=localhost"
        "; printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext"
        "; openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1"
        " -out server.pem -extfile server.ext"
        "; openssl req $K -keyout client.key -out client.csr -subj /CN=tagi-worker"
        "; openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1"
        " -out client.pem"
        // A second host's certificate from the same CA.
        "; openssl req $K -keyout intruder.key -out intruder.csr -subj /CN=tagi-intruder"
        "; openssl x509 -req -in intruder.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1"
        " -out intruder.pem"
        // A second CA that signed nothing of ours.
        "; openssl req -x509 $K -keyout other.key -out other.pem -days 1 -subj /CN=other");
    const ProcessResult r = RunProcess({"/bin/sh", "-c", script}, absl::Seconds(60));
    EXPECT_EQ(r.exit_code, 0) << "openssl failed: " << r.err;
    pki_ = d;
    return r.exit_code == 0;
  }
  std::string Pki(const std::string& file) const { return pki_ + "/" + file; }

  size_t JobCount() {
    const ProcessResult r = Ctl({"list"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    size_t lines = 0;
    for (char c : r.out) lines += c == '\n';
    return lines;  // the header and one line per job
  }

  std::string api_file_, join_file_, wrong_file_, pki_;
};

TEST_F(AuthTest, ApiTokenGuardsTheJobsServiceAndRefusedCallsChangeNothing) {
  WriteTokens();
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1, {"--api-tokens-file", api_file_}));
  const std::string job = WriteJob("toy", ToyJobJson({}));
  const std::string alice = dir_.Write("alice.token", absl::StrCat(kApiToken, "\n"));
  ctl_flags_ = {"--token-file", alice};
  const size_t jobs_before = JobCount();

  for (const std::vector<std::string>& creds :
       {std::vector<std::string>{}, std::vector<std::string>{"--token-file", wrong_file_}}) {
    ctl_flags_ = creds;
    const ProcessResult submit = Ctl({"submit", job});
    EXPECT_EQ(submit.exit_code, 1);
    EXPECT_THAT(submit.err, HasSubstr(creds.empty() ? "requires an API token"
                                                    : "API token is not valid"));
    EXPECT_EQ(Ctl({"cancel", "job-1"}).exit_code, 1);
    const ProcessResult download = Ctl({"download", "job-1", "-o", dir_.File("model.bin")});
    EXPECT_EQ(download.exit_code, 1);
    EXPECT_THAT(download.err, HasSubstr("API token"));
    EXPECT_FALSE(std::ifstream(dir_.File("model.bin")).good());
  }
  EXPECT_THAT(coordinator().Stderr(),
              HasSubstr("refused Jobs.Submit: no authorization metadata from"));
  EXPECT_THAT(coordinator().Stderr(), HasSubstr("refused Jobs.Submit: invalid API token from"));
  EXPECT_THAT(coordinator().Stderr(), ::testing::Not(HasSubstr(kApiToken)));
  // Someone trying tokens: one log line per host and reason per minute.
  ctl_flags_ = {"--token-file", wrong_file_};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Ctl({"list"}).exit_code, 1);
  const std::string log = coordinator().Stderr();
  size_t lines = 0;
  for (size_t at = log.find("refused Jobs.List: invalid API token"); at != std::string::npos;
       at = log.find("refused Jobs.List: invalid API token", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << log;

  ctl_flags_ = {"--token-file", alice};
  EXPECT_EQ(JobCount(), jobs_before) << "a refused submit created a job";
  const std::string id = Submit(job);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(JobCount(), jobs_before + 1);
  // Refused cancel leaves it queued; the token holder's cancel works.
  ctl_flags_ = {};
  EXPECT_EQ(Ctl({"cancel", id}).exit_code, 1);
  ctl_flags_ = {"--token-file", alice};
  auto queued = GetJob(id);
  ASSERT_TRUE(queued.has_value());
  EXPECT_NE(queued->state(), tagi::v1::CANCELLED);
  const ProcessResult cancel = Ctl({"cancel", id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_THAT(cancel.out, HasSubstr("CANCELLED"));
}

TEST_F(AuthTest, JoinTokenGuardsTheClusterAndAWorkerWithItTrains) {
  WriteTokens();
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1, {"--join-token-file", join_file_}));
  ChildProcess& bare = StartWorker();
  ChildProcess& wrong = StartWorker({"--join-token-file", wrong_file_});
  for (ChildProcess* w : {&bare, &wrong}) {
    auto exit = w->WaitExit(absl::Seconds(20));
    ASSERT_TRUE(exit.has_value()) << w->name() << " kept running without a valid join token";
    EXPECT_TRUE(exit->ExitedWith(1)) << exit->ToString();
    EXPECT_THAT(w->Stderr(), HasSubstr("join token"));
  }
  EXPECT_THAT(coordinator().Stderr(), HasSubstr("refused Cluster.Register: no join token from"));
  EXPECT_THAT(coordinator().Stderr(), ::testing::Not(HasSubstr(kJoinToken)));
  EXPECT_TRUE(Workers().empty());

  StartWorker({"--join-token-file", join_file_});
  ASSERT_TRUE(WaitForWorkers(1, "IDLE", absl::Seconds(20)));
  const std::string id = Submit(WriteJob("toy", ToyJobJson({})));
  ASSERT_FALSE(id.empty());
  auto job = WaitForJob(
      id, [](const tagi::v1::Job& j) { return IsTerminalForTest(j); }, absl::Seconds(120));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->state(), tagi::v1::SUCCEEDED) << job->reason();
}

TEST_F(AuthTest, MutualTlsWorkersAndTagictlConnectAndPlaintextIsRefused) {
  if (!HaveOpenssl()) GTEST_SKIP() << "the openssl CLI is not installed (tools/install_deps.sh)";
  ASSERT_TRUE(MakeCertificates());
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(
      1, {"--tls-cert", Pki("server.pem"), "--tls-key", Pki("server.key"), "--tls-client-ca",
          Pki("ca.pem")}));
  EXPECT_THAT(coordinator().Stderr(), HasSubstr("mutual TLS"));

  // Plaintext, a CA that did not sign the server, and TLS without a client
  // certificate: all refused, and tagictl says what to check.
  const ProcessResult plain = Ctl({"list"}, absl::Seconds(30));
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_THAT(plain.err, HasSubstr("pass --tls-ca"));
  ctl_flags_ = {"--tls-ca", Pki("other.pem"), "--tls-cert", Pki("client.pem"), "--tls-key",
                Pki("client.key")};
  EXPECT_EQ(Ctl({"list"}, absl::Seconds(30)).exit_code, 1);
  ctl_flags_ = {"--tls-ca", Pki("ca.pem")};
  EXPECT_EQ(Ctl({"list"}, absl::Seconds(30)).exit_code, 1);

  ctl_flags_ = {"--tls-ca", Pki("ca.pem"), "--tls-cert", Pki("client.pem"), "--tls-key",
                Pki("client.key")};
  StartWorker(ctl_flags_);
  ASSERT_TRUE(WaitForWorkers(1, "IDLE", absl::Seconds(20)));
  const std::string id = Submit(WriteJob("toy", ToyJobJson({})));
  ASSERT_FALSE(id.empty());
  auto job = WaitForJob(
      id, [](const tagi::v1::Job& j) { return IsTerminalForTest(j); }, absl::Seconds(120));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->state(), tagi::v1::SUCCEEDED) << job->reason();
  const ProcessResult download = Ctl({"download", id, "-o", dir_.File("model.bin")});
  EXPECT_EQ(download.exit_code, 0) << download.err;
}

// Under mutual TLS a worker's secret is bound to its certificate: another
// host of the same cluster (its own certificate from the same CA) that
// copied the id and the secret cannot use them.
TEST_F(AuthTest, UnderMutualTlsAWorkersSecretWorksOnlyWithItsOwnCertificate) {
  if (!HaveOpenssl()) GTEST_SKIP() << "the openssl CLI is not installed (tools/install_deps.sh)";
  ASSERT_TRUE(MakeCertificates());
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(
      1, {"--tls-cert", Pki("server.pem"), "--tls-key", Pki("server.key"), "--tls-client-ca",
          Pki("ca.pem")}));
  auto read = [this](const std::string& file) {
    std::ifstream in(Pki(file));
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  auto cluster = [&](const std::string& who) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = read("ca.pem");
    tls.pem_private_key = read(who + ".key");
    tls.pem_cert_chain = read(who + ".pem");
    return tagi::v1::Cluster::NewStub(grpc::CreateChannel(address(), grpc::SslCredentials(tls)));
  };
  auto worker = cluster("client");
  auto intruder = cluster("intruder");
  tagi::v1::RegisterResponse reg;
  const grpc::Status registered =
      worker->Register(WorkerCallContext().get(), tagi::v1::RegisterRequest(), &reg);
  ASSERT_TRUE(registered.ok()) << registered.error_message();
  tagi::v1::RendezvousRequest poll;
  poll.set_worker_id(reg.worker_id());
  tagi::v1::RendezvousResponse answer;
  // The worker itself: accepted (no job yet: it is told to poll again).
  const grpc::Status own =
      worker->Rendezvous(WorkerCallContext(reg.worker_id(), reg.secret()).get(), poll, &answer);
  EXPECT_TRUE(own.ok()) << own.error_message();
  // The same id and secret from the other certificate: refused.
  const grpc::Status stolen =
      intruder->Rendezvous(WorkerCallContext(reg.worker_id(), reg.secret()).get(), poll, &answer);
  EXPECT_EQ(stolen.error_code(), grpc::StatusCode::UNAUTHENTICATED) << stolen.error_message();
  // A re-registration from the other certificate does not get the id.
  tagi::v1::RegisterRequest again;
  again.set_worker_id(reg.worker_id());
  tagi::v1::RegisterResponse other;
  const grpc::Status reregistered =
      intruder->Register(WorkerCallContext(reg.worker_id(), reg.secret()).get(), again, &other);
  ASSERT_TRUE(reregistered.ok()) << reregistered.error_message();
  EXPECT_NE(other.worker_id(), reg.worker_id());
  EXPECT_NE(other.secret(), reg.secret());
}

TEST_F(AuthTest, RestGatewayServesHttpsAndAnswers401WithoutAToken) {
  if (!HaveOpenssl()) GTEST_SKIP() << "the openssl CLI is not installed (tools/install_deps.sh)";
  ASSERT_TRUE(MakeCertificates());
  WriteTokens();
  const std::string http_port_file = dir_.File("http.port");
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(
      1, {"--tls-cert", Pki("server.pem"), "--tls-key", Pki("server.key"), "--api-tokens-file",
          api_file_, "--http", "127.0.0.1:0", "--http-port-file", http_port_file}));
  std::string text;
  std::ifstream(http_port_file) >> text;
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(text, &port)) << text;

  httplib::SSLClient client("127.0.0.1", port);
  client.set_ca_cert_path(Pki("ca.pem").c_str());
  client.enable_server_certificate_verification(true);
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health) << "HTTPS failed: " << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);

  const std::string body = ToyJobJson({});
  for (const char* auth : {"", "Bearer wrong", "Basic abc"}) {
    httplib::Headers headers;
    if (*auth != '\0') headers.emplace("Authorization", auth);
    auto post = client.Post("/v1/jobs", headers, body, "application/json");
    ASSERT_TRUE(post);
    EXPECT_EQ(post->status, 401) << auth;
    EXPECT_EQ(post->get_header_value("WWW-Authenticate"), "Bearer realm=\"tagi\"");
    EXPECT_THAT(post->body, HasSubstr("\"code\": \"UNAUTHENTICATED\""));
    auto cancel = client.Post("/v1/jobs/job-1:cancel", headers, "{}", "application/json");
    ASSERT_TRUE(cancel);
    EXPECT_EQ(cancel->status, 401);
    auto model = client.Get("/v1/jobs/job-1/model", headers);
    ASSERT_TRUE(model);
    EXPECT_EQ(model->status, 401);
  }
  const httplib::Headers good = {{"Authorization", absl::StrCat("Bearer ", kApiToken)}};
  auto list = client.Get("/v1/jobs", good);
  ASSERT_TRUE(list);
  EXPECT_EQ(list->status, 200);
  EXPECT_THAT(list->body, ::testing::Not(HasSubstr("\"id\"")))
      << "a refused submit created a job";
  auto post = client.Post("/v1/jobs", good, body, "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 201) << post->body;

  // Plain HTTP to the HTTPS port gets no answer.
  httplib::Client plain("127.0.0.1", port);
  plain.set_read_timeout(std::chrono::seconds(5));
  auto refused = plain.Get("/healthz");
  EXPECT_TRUE(!refused || refused->status != 200);
}

TEST_F(AuthTest, StartupRefusesBadTokenFilesAndPlaintextOffLoopback) {
  const std::string bin = BinPath("tagi-coordinator");
  const std::string empty = dir_.Write("empty.tokens", "# nobody yet\n\n");
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--api-tokens-file", dir_.File("missing")}, "--api-tokens-file " + dir_.File("missing")},
      {{"--api-tokens-file", empty}, "holds no token"},
      {{"--join-token-file", empty}, "holds no token"},
      {{"--tls-cert", empty}, "--tls-cert and --tls-key go together"},
      {{"--tls-cert", empty, "--tls-key", empty}, "not a PEM file"},
      {{"--listen", "0.0.0.0:0"}, "pass --insecure"},
      {{"--http", "0.0.0.0:0"}, "refusing to serve plaintext on the non-loopback address"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {bin};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    const ProcessResult r = RunProcess(argv, absl::Seconds(20));
    EXPECT_EQ(r.exit_code, 2) << c.flags[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
  // TLS off loopback, but nothing authenticates workers: refused, until a
  // join token or a client CA is given.
  if (HaveOpenssl() && MakeCertificates()) {
    WriteTokens();
    const std::vector<std::string> tls = {bin, "--listen", "0.0.0.0:0", "--tls-cert",
                                          Pki("server.pem"), "--tls-key", Pki("server.key"),
                                          "--port-file", dir_.File("open.port")};
    const ProcessResult open = RunProcess(tls, absl::Seconds(20));
    EXPECT_EQ(open.exit_code, 2) << open.err;
    EXPECT_THAT(open.err, HasSubstr("register as a worker"));
    EXPECT_THAT(open.err, HasSubstr("--join-token-file"));
    std::vector<std::string> with_token = tls;
    with_token.insert(with_token.end(), {"--join-token-file", join_file_});
    ChildProcess guarded(with_token, dir_, "guarded");
    EXPECT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir_.File("open.port")); },
                          absl::Seconds(20)))
        << guarded.Stderr();
    EXPECT_TRUE(guarded.Alive()) << guarded.Stderr();
  }
  for (const std::string tool : {"tagi-worker", "tagictl"}) {
    std::vector<std::string> argv = {BinPath(tool), "--coord", "127.0.0.1:1"};
    argv.push_back(tool == "tagictl" ? "--token-file" : "--join-token-file");
    argv.push_back(empty);
    if (tool == "tagictl") argv.push_back("list");
    const ProcessResult r = RunProcess(argv, absl::Seconds(20));
    EXPECT_EQ(r.exit_code, 2) << tool << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("holds no token"));
  }
}

}  // namespace
}  // namespace tagi::testing
