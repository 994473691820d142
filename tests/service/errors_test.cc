// Requests the service must refuse, each with a message that says what was
// wrong, while it keeps serving. The protocol-version check is exercised
// with the generated stubs directly, since tagictl always sends ours.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tagi/v1/cluster.grpc.pb.h"
#include "tagi/v1/jobs.grpc.pb.h"
#include "tests/service/service_cluster.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using ServiceErrors = ServiceTest;

TEST_F(ServiceErrors, InvalidJobIsRefusedAtSubmission) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  // The second LINEAR takes 50 inputs but the first gives 100.
  const std::string file = WriteJob("bad", R"({
  "name": "bad-sizes",
  "layers": [
    {"kind": "LINEAR", "inFeatures": 784, "outFeatures": 100},
    {"kind": "RELU"},
    {"kind": "LINEAR", "inFeatures": 50, "outFeatures": 11}
  ],
  "head": {"classification": {"numClasses": 10}},
  "data": {"kind": "FASHION_MNIST"},
  "noise": {"sigmaV": 1.0},
  "batchSize": 16, "epochs": 1, "seed": 1, "worldSize": 1, "device": "cpu"
})");
  const ProcessResult r = Ctl({"submit", file});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("layers[2].inFeatures"));
  EXPECT_EQ(r.out, "") << "a refused job printed an id";

  const ProcessResult list = Ctl({"list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, Not(HasSubstr("job-1"))) << "the refused job was queued";
}

TEST_F(ServiceErrors, SubmitOverridesAreAppliedOrRefusedPrecisely) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  const std::string file = WriteJob("toy", ToyJobJson({.name = "toy"}));
  // Refused here, before anything is sent.
  ProcessResult r = Ctl({"submit", file, "--set", "epoch=3"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("the job has no field \"epoch\" (did you mean \"epochs\"?)"));
  r = Ctl({"submit", file, "--set", "batchSize=0"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("with --set batchSize=0: invalid job: batchSize"));
  r = Ctl({"list", "--set", "epochs=3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--set goes with submit"));
  EXPECT_THAT(Ctl({"list"}).out, Not(HasSubstr("job-1")));
  // Applied: the job the coordinator holds has the overridden values.
  r = Ctl({"submit", file, "--set", "epochs=7", "--set", "name=renamed"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::optional<tagi::v1::Job> job = GetJob(std::string(absl::StripAsciiWhitespace(r.out)));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->spec().epochs(), 7u);
  EXPECT_EQ(job->spec().name(), "renamed");
  EXPECT_EQ(job->spec().batch_size(), 10u);  // the file's
}

TEST_F(ServiceErrors, WorldLargerThanClusterIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  const ProcessResult r =
      Ctl({"submit", WriteJob("big", ToyJobJson({.name = "too-big", .world = 5}))});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("--world"));
  EXPECT_THAT(r.err, HasSubstr("5"));
  EXPECT_EQ(Ctl({"list"}).exit_code, 0);
}

TEST_F(ServiceErrors, StreamsBeyondThePerClientLimitAreRefused) {
  StartCoordinator(1, {"--max-streams-per-client", "2"});
  const std::string id = Submit(WriteJob("toy", ToyJobJson({})));  // no workers: stays PENDING
  ASSERT_FALSE(id.empty());
  std::vector<std::unique_ptr<ChildProcess>> watchers;
  for (int i = 0; i < 2; ++i) {
    watchers.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{BinPath("tagictl"), "--coord", address(), "watch", id}, dir_,
        absl::StrCat("watch", i)));
  }
  // Both watches are open once each has printed the pending job (on stderr).
  ASSERT_TRUE(WaitUntil(
      [&] {
        return watchers[0]->Stderr().find("PENDING") != std::string::npos &&
               watchers[1]->Stderr().find("PENDING") != std::string::npos;
      },
      absl::Seconds(20)));
  const ProcessResult third = Ctl({"watch", id}, absl::Seconds(20));
  EXPECT_NE(third.exit_code, 0);
  EXPECT_THAT(third.err, HasSubstr("already holds 2 streams"));
  // Unary calls are not streams: still served.
  EXPECT_EQ(Ctl({"status", id}).exit_code, 0);
  // A slot comes back when a watcher leaves.
  ASSERT_TRUE(watchers[0]->Signal(SIGTERM));
  ASSERT_TRUE(watchers[0]->WaitExit(absl::Seconds(10)).has_value());
  // (the server notices the closed stream within its 1 s poll)
  EXPECT_TRUE(WaitUntil(
      [&] {
        const ProcessResult r = Ctl({"--watch-timeout", "1s", "watch", id});
        return r.err.find("PENDING") != std::string::npos;
      },
      absl::Seconds(20)));
}

TEST_F(ServiceErrors, UnknownJobIdIsNotFound) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"status", "job-999"},
                                             {"status", "job-999", "--json"},
                                             {"watch", "job-999"},
                                             {"cancel", "job-999"},
                                             {"download", "job-999", "-o", dir_.File("m.tagi")}}) {
    SCOPED_TRACE(args[0]);
    const ProcessResult r = Ctl(args);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("no job with id"));
    EXPECT_THAT(r.err, HasSubstr("job-999"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.File("m.tagi")));
}

TEST_F(ServiceErrors, BusyPortIsAClearError) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  const ProcessResult second = RunProcess(
      {BinPath("tagi-coordinator"), "--world", "1", "--listen", address()}, absl::Seconds(20));
  ASSERT_FALSE(second.timed_out) << "a second coordinator on " << address() << " kept running";
  EXPECT_FALSE(second.signaled) << "signal " << second.signal;
  EXPECT_NE(second.exit_code, 0);
  EXPECT_THAT(second.err, HasSubstr(address()));
  // The first one still serves, and is still running.
  EXPECT_EQ(Ctl({"list"}).exit_code, 0);
  EXPECT_TRUE(coordinator().Alive());
}

// A Jobs or Cluster stub on a plain channel, with the given protocol
// metadata (none when `version` is null).
class RawClient {
 public:
  explicit RawClient(const std::string& address)
      : channel_(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
        jobs_(tagi::v1::Jobs::NewStub(channel_)),
        cluster_(tagi::v1::Cluster::NewStub(channel_)) {}

  std::unique_ptr<grpc::ClientContext> Context(const char* version) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (version != nullptr) ctx->AddMetadata(kProtocolMetadataKey, version);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ctx;
  }
  grpc::Status List(const char* version) {
    tagi::v1::ListJobsResponse resp;
    return jobs_->List(Context(version).get(), {}, &resp);
  }
  grpc::Status Submit(const char* version, const tagi::v1::JobSpec& spec) {
    tagi::v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    tagi::v1::Job resp;
    return jobs_->Submit(Context(version).get(), req, &resp);
  }
  grpc::Status Register(const char* version) {
    tagi::v1::RegisterRequest req;
    req.set_hostname("test");
    req.set_device("cpu");
    req.set_threads(1);
    tagi::v1::RegisterResponse resp;
    return cluster_->Register(Context(version).get(), req, &resp);
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tagi::v1::Jobs::Stub> jobs_;
  std::unique_ptr<tagi::v1::Cluster::Stub> cluster_;
};

TEST_F(ServiceErrors, ProtocolMismatchIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  RawClient client(address());
  // Our version passes: the refusals below are about the version only.
  const grpc::Status ours = client.List(kProtocolVersion);
  ASSERT_TRUE(ours.ok()) << ours.error_code() << ": " << ours.error_message();

  const grpc::Status other = client.List("0");
  EXPECT_EQ(other.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << other.error_message();
  EXPECT_THAT(other.error_message(), HasSubstr("protocol 0"));
  EXPECT_THAT(other.error_message(), HasSubstr(absl::StrCat("speaks ", kProtocolVersion)));

  const grpc::Status none = client.List(nullptr);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << none.error_message();
  EXPECT_THAT(none.error_message(), HasSubstr(kProtocolMetadataKey));
  EXPECT_THAT(none.error_message(), HasSubstr(absl::StrCat("protocol ", kProtocolVersion)));

  // Workers of another version are refused too, and nothing registers.
  const grpc::Status worker = client.Register("0");
  EXPECT_EQ(worker.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << worker.error_message();
  EXPECT_THAT(worker.error_message(), HasSubstr("protocol 0"));
  EXPECT_TRUE(Workers().empty());
}

TEST_F(ServiceErrors, CoordinatorValidatesSpecsFromAnyClient) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  RawClient client(address());
  tagi::v1::JobSpec spec;  // no layers, no head, batch size 0
  const grpc::Status st = client.Submit(kProtocolVersion, spec);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("batchSize"));
  EXPECT_THAT(st.error_message(), HasSubstr("layers"));
  const ProcessResult list = Ctl({"list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, Not(HasSubstr("job-1")));
}

}  // namespace
}  // namespace tagi::testing
