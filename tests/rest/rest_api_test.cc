// The REST API's happy paths against a real tagi-coordinator --http: jobs
// (submit, list, get, cancel), workers, model download, health, readiness,
// metrics, and agreement with the gRPC face (tagictl) on the same jobs.
#include <arpa/inet.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/rest/rest_fixture.h"

namespace tagi::testing {
namespace {

using google::protobuf::util::MessageDifferencer;
using tagi::v1::Job;
using ::testing::HasSubstr;
using ::testing::StartsWith;

tagi::v1::JobSpec SpecOf(const std::string& json) {
  tagi::v1::JobSpec spec;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &spec).ok()) << json;
  return spec;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &out).ok());
  return out;
}

using RestApi = RestTest;

TEST_F(RestApi, HealthzAndReadyzAnswerOk) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  for (const char* path : {"/healthz", "/readyz"}) {
    SCOPED_TRACE(path);
    const HttpReply reply = Get(path);
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.body, "ok\n");
    EXPECT_THAT(reply.Header("Content-Type"), StartsWith("text/plain"));
  }
}

TEST_F(RestApi, ReadyzIs503WhileTheStateDirCannotBeWritten) {
  // A regular file where the state dir's parent should be: not writable
  // even by root.
  const std::string blocker = dir_.Write("not-a-dir", "x");
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1, {"--state-dir", blocker + "/state"}));
  ExpectError(Get("/readyz"), 503, "UNAVAILABLE", "state dir");
  EXPECT_EQ(Get("/healthz").status, 200) << "liveness does not depend on the state dir";
}

TEST_F(RestApi, MetricsServesPrometheusText) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  ASSERT_EQ(Post("/v1/jobs", ToyJobJson()).status, 201);
  const HttpReply reply = Get("/metrics");
  EXPECT_EQ(reply.status, 200);
  EXPECT_THAT(reply.Header("Content-Type"), StartsWith("text/plain; version=0.0.4"));
  EXPECT_THAT(reply.body, HasSubstr("# TYPE tagi_coordinator_"));
}

TEST_F(RestApi, SubmitListGetCancel) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  // A bare JobSpec and a SubmitJobRequest are both accepted.
  const HttpReply first = Post("/v1/jobs", ToyJobJson("first", 2, 2));
  ASSERT_EQ(first.status, 201) << first.body;
  EXPECT_THAT(first.Header("Content-Type"), StartsWith("application/json"));
  const HttpReply second =
      Post("/v1/jobs", absl::StrCat(R"({"spec": )", ToyJobJson("second", 2, 2), "}"));
  ASSERT_EQ(second.status, 201) << second.body;
  const auto a = ParseJob(first);
  const auto b = ParseJob(second);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(first.Header("Location"), "/v1/jobs/" + a->id());
  EXPECT_NE(a->id(), b->id());
  EXPECT_EQ(a->state(), tagi::v1::PENDING);  // no workers
  EXPECT_EQ(b->spec().name(), "second");

  const HttpReply list = Get("/v1/jobs");
  ASSERT_EQ(list.status, 200);
  tagi::v1::ListJobsResponse jobs;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(list.body, &jobs).ok()) << list.body;
  ASSERT_EQ(jobs.jobs_size(), 2);
  EXPECT_EQ(jobs.jobs(0).id(), a->id());
  EXPECT_EQ(jobs.jobs(1).id(), b->id());

  const auto got = ParseJob(Get("/v1/jobs/" + a->id()));
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(MessageDifferencer::Equals(*got, *a)) << got->DebugString() << a->DebugString();

  const HttpReply cancel = Post("/v1/jobs/" + b->id() + ":cancel", "");
  ASSERT_EQ(cancel.status, 200) << cancel.body;
  EXPECT_EQ(ParseJob(cancel)->state(), tagi::v1::CANCELLED);
  EXPECT_EQ(ParseJob(Get("/v1/jobs/" + b->id()))->state(), tagi::v1::CANCELLED);
  EXPECT_EQ(ParseJob(Get("/v1/jobs/" + a->id()))->state(), tagi::v1::PENDING)
      << "cancelling one job touched another";
  // {} is an empty body too; a job that is over cannot be cancelled again.
  ExpectError(Post("/v1/jobs/" + b->id() + ":cancel", "{}"), 409, "FAILED_PRECONDITION",
              "already CANCELLED");
}

TEST_F(RestApi, SubmittedJobRoundTrips) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  const std::string file = ReadSourceFile("examples/toy_cubic.json");
  ASSERT_FALSE(file.empty());
  const HttpReply submitted = Post("/v1/jobs", file);
  ASSERT_EQ(submitted.status, 201) << submitted.body;
  const auto job = ParseJob(submitted);
  ASSERT_TRUE(job.has_value());
  EXPECT_TRUE(MessageDifferencer::Equals(job->spec(), SpecOf(file)))
      << "the job's spec is not the submitted one: " << job->spec().DebugString();

  // The body is exactly the Job in the proto3 JSON mapping.
  const HttpReply got = Get("/v1/jobs/" + job->id());
  ASSERT_EQ(got.status, 200);
  const auto parsed = ParseJob(got);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(got.body, ToJson(*parsed) + "\n");

  // The printed spec is accepted again as it is, and means the same job.
  const HttpReply again = Post("/v1/jobs", ToJson(parsed->spec()));
  ASSERT_EQ(again.status, 201) << again.body;
  EXPECT_TRUE(MessageDifferencer::Equals(ParseJob(again)->spec(), parsed->spec()));
}

TEST_F(RestApi, JobsAgreeWithTheGrpcFace) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  const HttpReply submitted = Post("/v1/jobs", ToyJobJson());
  ASSERT_EQ(submitted.status, 201);
  const auto job = ParseJob(submitted);
  ASSERT_TRUE(job.has_value());
  const ProcessResult ctl =
      RunProcess({BinPath("tagictl"), "--coord", grpc_address(), "status", job->id(), "--json"},
                 absl::Seconds(30));
  ASSERT_EQ(ctl.exit_code, 0) << ctl.err;
  Job from_grpc;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ctl.out, &from_grpc).ok()) << ctl.out;
  const auto from_rest = ParseJob(Get("/v1/jobs/" + job->id()));
  ASSERT_TRUE(from_rest.has_value());
  EXPECT_TRUE(MessageDifferencer::Equals(*from_rest, from_grpc))
      << from_rest->DebugString() << "\nvs gRPC\n"
      << from_grpc.DebugString();
}

TEST_F(RestApi, WorkersListsRegisteredWorkers) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  const HttpReply empty = Get("/v1/workers");
  ASSERT_EQ(empty.status, 200);
  EXPECT_EQ(empty.body, "{}\n") << "an empty list is printed as {} in the proto3 JSON mapping";
  StartWorker();
  ASSERT_TRUE(WaitForIdleWorkers(1, absl::Seconds(20))) << Get("/v1/workers").body;
  tagi::v1::ListWorkersResponse workers;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(Get("/v1/workers").body, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_FALSE(workers.workers(0).id().empty());
  EXPECT_GT(workers.workers(0).last_seen_ms(), 0);
}

TEST_F(RestApi, ModelDownloadMatchesTheGrpcDownload) {
  Job finished;
  ASSERT_NO_FATAL_FAILURE(RunToyJobToSuccess("model", 3, &finished));
  const Job* done = &finished;
  const std::string id = finished.id();

  const HttpReply model = Get("/v1/jobs/" + id + "/model");
  ASSERT_EQ(model.status, 200) << model.body;
  EXPECT_EQ(model.Header("Content-Type"), "application/octet-stream");
  EXPECT_EQ(model.Header("Content-Disposition"),
            absl::StrCat("attachment; filename=\"", id, ".tagi\""));
  EXPECT_EQ(model.body.size(), done->model_bytes());

  const std::string grpc_file = dir_.File("grpc.tagi");
  const ProcessResult ctl =
      RunProcess({BinPath("tagictl"), "--coord", grpc_address(), "download", id, "-o", grpc_file},
                 absl::Seconds(30));
  ASSERT_EQ(ctl.exit_code, 0) << ctl.err;
  EXPECT_TRUE(ReadFileOrEmpty(grpc_file) == model.body)
      << "the REST download differs from the gRPC one";
}

// A job's log: its rank's lines (start, epochs, end) over REST and
// `tagictl logs`, read from a seq on, with bad queries refused.
TEST_F(RestApi, JobLogsOverRestAndTagictl) {
  Job finished;
  ASSERT_NO_FATAL_FAILURE(RunToyJobToSuccess("logged", 3, &finished));
  const Job* done = &finished;
  const std::string id = finished.id();

  // The rank's last line comes just after the job ended.
  tagi::v1::JobLogs logs;
  ASSERT_TRUE(tagi::testing::WaitUntil(
      [&] {
        const HttpReply r = Get("/v1/jobs/" + id + "/logs");
        logs.Clear();
        return r.status == 200 &&
               google::protobuf::util::JsonStringToMessage(r.body, &logs).ok() &&
               logs.lines_size() > 0 &&
               logs.lines(logs.lines_size() - 1).text() == "finished";
      },
      absl::Seconds(20), absl::Milliseconds(50)))
      << Get("/v1/jobs/" + id + "/logs").body;
  // Start, epochs (a line a second at most: the first and the last here),
  // end; and a hold line at a snapshot point when the session had not yet
  // heard the coordinator (a loaded machine: it counts as not reached).
  ASSERT_GE(logs.lines_size(), 4);
  ASSERT_LE(logs.lines_size(), 8);
  const int n = logs.lines_size();
  EXPECT_THAT(logs.lines(0).text(), ::testing::HasSubstr("rank 0 of 1 on worker"));
  EXPECT_THAT(logs.lines(1).text(), ::testing::StartsWith("epoch 1: test rmse"));
  int epoch3 = 0;
  for (const auto& line : logs.lines()) {
    epoch3 += absl::StartsWith(line.text(), "epoch 3: test rmse");
    if (!absl::StartsWith(line.text(), "epoch ") && line.text() != "finished" &&
        line.text().find("rank 0 of 1") == std::string::npos) {
      EXPECT_THAT(line.text(), ::testing::HasSubstr("holding at this snapshot point"));
    }
  }
  EXPECT_EQ(epoch3, 1);
  EXPECT_EQ(logs.lines(0).rank(), 0u);
  EXPECT_EQ(logs.lines(0).generation(), 1u);
  EXPECT_EQ(logs.lines(0).worker_id(), done->workers(0));
  EXPECT_GT(logs.lines(0).time_ms(), 0);
  EXPECT_EQ(logs.next(), static_cast<uint64_t>(n));
  EXPECT_EQ(logs.state(), tagi::v1::SUCCEEDED);

  tagi::v1::JobLogs some;
  const HttpReply part = Get("/v1/jobs/" + id + "/logs?after=1&maxLines=2");
  ASSERT_EQ(part.status, 200) << part.body;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(part.body, &some).ok());
  ASSERT_EQ(some.lines_size(), 2);
  EXPECT_EQ(some.lines(0).seq(), 2u);
  EXPECT_EQ(some.next(), 3u);
  ExpectError(Get("/v1/jobs/" + id + "/logs?after=-1"), 400, "INVALID_ARGUMENT",
              "query parameter after=\"-1\": expected an integer");
  ExpectError(Get("/v1/jobs/" + id + "/logs?after=1&after=2"), 400, "INVALID_ARGUMENT",
              "given twice");
  ExpectError(Get("/v1/jobs/" + id + "/logs?tail=3"), 400, "INVALID_ARGUMENT",
              "takes the query parameters after, maxLines");
  ExpectError(Get("/v1/jobs/job-99/logs"), 404, "NOT_FOUND", "job-99");

  const ProcessResult ctl = RunProcess(
      {BinPath("tagictl"), "--coord", grpc_address(), "logs", id, "--follow"}, absl::Seconds(30));
  ASSERT_EQ(ctl.exit_code, 0) << ctl.err;
  EXPECT_THAT(ctl.out, ::testing::HasSubstr(absl::StrCat("rank 0 gen 1 ", done->workers(0),
                                                         ": epoch 3: test rmse")));
  EXPECT_THAT(ctl.out, ::testing::EndsWith(": finished\n"));
  const ProcessResult after = RunProcess(
      {BinPath("tagictl"), "--coord", grpc_address(), "logs", id, "--after",
       std::to_string(n - 1)},
      absl::Seconds(30));
  EXPECT_EQ(std::count(after.out.begin(), after.out.end(), '\n'), 1) << after.out;
  ExpectServing();
}

TEST_F(RestApi, ModelOfAJobWithoutOneIsAConflict) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  const HttpReply submitted = Post("/v1/jobs", ToyJobJson());
  ASSERT_EQ(submitted.status, 201);
  const std::string id = ParseJob(submitted)->id();
  ExpectError(Get("/v1/jobs/" + id + "/model"), 409, "FAILED_PRECONDITION", "has no model");
  ExpectServing();
}

TEST_F(RestApi, HeadIsServedWhereverGetIs) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  const HttpReply head = Request("HEAD", "/v1/jobs");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(head.Header("Content-Length"), std::to_string(Get("/v1/jobs").body.size()));
}

TEST_F(RestApi, BusyHttpPortIsAClearError) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  const ProcessResult second = RunProcess({BinPath("tagi-coordinator"), "--listen", "127.0.0.1:0",
                                           "--http", "127.0.0.1:" + std::to_string(http_port())},
                                          absl::Seconds(20));
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_THAT(second.err, HasSubstr("--http: cannot listen on 127.0.0.1:"));
  ExpectServing();
}

TEST_F(RestApi, StopsPromptlyOnSigtermWithAnIdleConnectionOpen) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  // A client that connects and sends nothing holds a server thread until
  // the read timeout; shutdown must not wait for it any longer than that.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(http_port()));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(Get("/healthz").status, 200);  // served beside the idle connection
  ASSERT_TRUE(coordinator().Signal(SIGTERM));
  const auto exit = coordinator().WaitExit(absl::Seconds(15));
  ::close(fd);
  ASSERT_TRUE(exit.has_value()) << "still running 15 s after SIGTERM";
  EXPECT_TRUE(exit->ExitedWith(0)) << exit->ToString();
}

}  // namespace
}  // namespace tagi::testing
