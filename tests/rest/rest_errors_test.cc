// Requests the REST API must refuse, each with the right 4xx status and an
// Error body whose message says what was wrong, while the coordinator keeps
// serving.
#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/rest/rest_fixture.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class RestErrors : public RestTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(StartCoordinator(2)); }
  void TearDown() override {
    ExpectServing();
    // Nothing refused was queued (the tests cancel what they queue).
    tagi::v1::ListJobsResponse jobs;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(Get("/v1/jobs").body, &jobs).ok());
    for (const auto& job : jobs.jobs()) {
      EXPECT_EQ(job.state(), tagi::v1::CANCELLED) << job.id() << " was queued";
    }
    RestTest::TearDown();
  }
};

TEST_F(RestErrors, MalformedJsonIs400) {
  ExpectError(Post("/v1/jobs", R"({"name": "x", )"), 400, "INVALID_ARGUMENT", "not valid JSON");
}

TEST_F(RestErrors, NonObjectOrEmptyBodyIs400) {
  ExpectError(Post("/v1/jobs", "[1, 2]"), 400, "INVALID_ARGUMENT", "not a JSON object");
  ExpectError(Post("/v1/jobs", "\"job\""), 400, "INVALID_ARGUMENT", "not a JSON object");
  ExpectError(Post("/v1/jobs", ""), 400, "INVALID_ARGUMENT", "the body is empty");
}

TEST_F(RestErrors, WrongTypeIs400) {
  std::string job = ToyJobJson();
  job.replace(job.find("\"batchSize\": 10"), 15, R"("batchSize": "ten")");
  ExpectError(Post("/v1/jobs", job), 400, "INVALID_ARGUMENT", "batchSize");
  ExpectError(Post("/v1/jobs", R"({"spec": [1]})"), 400, "INVALID_ARGUMENT", "SubmitJobRequest");
}

TEST_F(RestErrors, UnknownFieldIs400) {
  std::string job = ToyJobJson();
  job.insert(1, R"("batchSizes": 10, )");
  ExpectError(Post("/v1/jobs", job), 400, "INVALID_ARGUMENT", "batchSizes");
  ExpectError(Post("/v1/jobs", absl::StrCat(R"({"spec": )", ToyJobJson(), R"(, "priority": 1})")),
              400, "INVALID_ARGUMENT", "priority");
}

TEST_F(RestErrors, InvalidJobSpecIs400WithTheValidationMessage) {
  // The first LINEAR now gives 100 outputs but the second takes 50.
  std::string job = ToyJobJson();
  job.replace(job.find("\"outFeatures\": 50"), 17, R"("outFeatures": 100)");
  ExpectError(Post("/v1/jobs", job), 400, "INVALID_ARGUMENT", "layers[2].inFeatures");
  ExpectError(Post("/v1/jobs", "{}"), 400, "INVALID_ARGUMENT", "invalid job: layers: empty");
}

TEST_F(RestErrors, WorldLargerThanTheCoordinatorsIs400) {
  ExpectError(Post("/v1/jobs", ToyJobJson("big", 1, 5)), 400, "INVALID_ARGUMENT", "--world");
}

TEST_F(RestErrors, BodyOverTheLimitIs413) {
  const std::string big = absl::StrCat(R"({"name": ")", std::string(2 << 20, 'x'), R"("})");
  ExpectError(Post("/v1/jobs", big), 413, "INVALID_ARGUMENT", "limit of 1048576 bytes");
  // The refused body was consumed: the same connection carries the next request.
  httplib::Client client("127.0.0.1", http_port());
  client.set_keep_alive(true);
  auto refused = client.Post("/v1/jobs", big, "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 413);
  auto next = client.Get("/healthz");
  ASSERT_TRUE(next) << httplib::to_string(next.error());
  EXPECT_EQ(next->status, 200);
}

TEST_F(RestErrors, BodyThatIsNotJsonIs415) {
  ExpectError(Request("POST", "/v1/jobs", ToyJobJson(), "text/plain"), 415, "INVALID_ARGUMENT",
              "Content-Type: application/json");
  ExpectError(Request("POST", "/v1/jobs", ToyJobJson(), "application/x-www-form-urlencoded"), 415,
              "INVALID_ARGUMENT", "Content-Type");
  ExpectError(Request("POST", "/v1/jobs", ToyJobJson(), ""), 415, "INVALID_ARGUMENT",
              "Content-Type");
  EXPECT_EQ(Request("POST", "/v1/jobs", ToyJobJson(), "Application/JSON; charset=utf-8").status,
            201)
      << "media types are case-insensitive and take parameters";
  ASSERT_EQ(Post("/v1/jobs/job-1:cancel", "").status, 200);  // leaves nothing queued
}

TEST_F(RestErrors, UnknownJobIdIs404) {
  ExpectError(Get("/v1/jobs/job-999"), 404, "NOT_FOUND", "no job with id \"job-999\"");
  ExpectError(Post("/v1/jobs/job-999:cancel", ""), 404, "NOT_FOUND", "job-999");
  ExpectError(Get("/v1/jobs/job-999/model"), 404, "NOT_FOUND", "job-999");
}

TEST_F(RestErrors, UnknownPathIs404) {
  ExpectError(Get("/v2/jobs"), 404, "NOT_FOUND", "no such path: /v2/jobs");
  ExpectError(Get("/v1/jobs/job-1/model/extra"), 404, "NOT_FOUND", "no such path");
  ExpectError(Post("/v1/jobs/job-1:pause", ""), 404, "NOT_FOUND", "no such path");
}

TEST_F(RestErrors, WrongMethodIs405WithAllow) {
  struct Case {
    std::string method, path, allow;
  };
  for (const Case& c : std::vector<Case>{{"DELETE", "/v1/jobs/job-1", "GET, HEAD"},
                                         {"PUT", "/v1/jobs", "GET, HEAD, POST"},
                                         {"PATCH", "/v1/jobs/job-1", "GET, HEAD"},
                                         {"GET", "/v1/jobs/job-1:cancel", "POST"},
                                         {"POST", "/v1/workers", "GET, HEAD"},
                                         {"POST", "/healthz", "GET, HEAD"},
                                         {"OPTIONS", "/metrics", "GET, HEAD"},
                                         {"TRACE", "/v1/jobs", "GET, HEAD, POST"}}) {
    SCOPED_TRACE(c.method + " " + c.path);
    const HttpReply reply = Request(c.method, c.path, c.method == "PUT" ? ToyJobJson() : "");
    ExpectError(reply, 405, "UNIMPLEMENTED", c.method + " is not served on " + c.path);
    EXPECT_EQ(reply.Header("Allow"), c.allow);
  }
}

TEST_F(RestErrors, BodilessPostIsAnsweredAtOnce) {
  // No Content-Length and no Transfer-Encoding: no body (RFC 9112 6.3). The
  // answer must not wait for the client to close the connection.
  const std::string reply = SendRaw("POST /v1/jobs/job-9:cancel HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(reply, HasSubstr("no job with id"));
  EXPECT_THAT(SendRaw("DELETE /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n"), StartsWith("HTTP/1.1 405"));
}

// %00 in a path used to end it (the decoded NUL cut the C string): the job
// of the prefix was served. It is a character of the id now, which names no
// job; other escapes still decode.
TEST_F(RestErrors, AnEncodedNulDoesNotCutThePath) {
  const HttpReply created = Post("/v1/jobs", ToyJobJson());
  ASSERT_EQ(created.status, 201) << created.body;
  ASSERT_EQ(Get("/v1/jobs/job-1").status, 200);
  const HttpReply cut = Get("/v1/jobs/job-1%00.json");
  EXPECT_EQ(cut.status, 404) << cut.body;
  EXPECT_THAT(cut.body, HasSubstr("job-1%00.json"));
  EXPECT_EQ(Get("/v1/jobs/job%2D1").status, 200);  // %2D is '-'
  ASSERT_EQ(Post("/v1/jobs/job-1:cancel", "").status, 200);  // leaves nothing queued
}

TEST_F(RestErrors, QueryParametersAre400) {
  ExpectError(Get("/v1/jobs?state=RUNNING"), 400, "INVALID_ARGUMENT",
              "takes no query parameters (got \"state\")");
}

TEST_F(RestErrors, CancelWithABodyOtherThanEmptyIs400) {
  ASSERT_EQ(Post("/v1/jobs", ToyJobJson("x", 2, 2)).status, 201);
  ExpectError(Post("/v1/jobs/job-1:cancel", R"({"id": "job-1"})"), 400, "INVALID_ARGUMENT",
              "cancel takes no body");
  ASSERT_EQ(Post("/v1/jobs/job-1:cancel", "").status, 200);  // leaves nothing queued
}

TEST_F(RestErrors, MalformedRequestIs400AndTheGatewayServesOn) {
  // A header line without a colon: libmicrohttpd answers 400 itself.
  EXPECT_THAT(SendRaw("GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(SendRaw("POST /v1/jobs HTTP/1.1\r\nContent-Length: abc\r\n\r\n"),
              StartsWith("HTTP/1.1 400"));
  // No HTTP version at all: the connection is closed without a reply.
  EXPECT_EQ(SendRaw("GARBAGE\r\n\r\n"), "");
  EXPECT_EQ(Get("/healthz").status, 200);
}

}  // namespace
}  // namespace tagi::testing
