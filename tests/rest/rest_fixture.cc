#include "tests/rest/rest_fixture.h"

#include <arpa/inet.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"

namespace tagi::testing {
namespace {

std::string Tail(const std::string& text, size_t n) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

int ReadPort(const std::string& path) {
  const std::string text = ReadFileOrEmpty(path);
  if (text.empty() || text.back() != '\n') return 0;
  return std::atoi(text.c_str());
}

}  // namespace

std::string BinPath(const std::string& name) { return std::string(TAGI_BIN_DIR) + "/" + name; }
std::string SourcePath(const std::string& name) {
  return std::string(TAGI_SOURCE_DIR) + "/" + name;
}
std::string ReadSourceFile(const std::string& name) { return ReadFileOrEmpty(SourcePath(name)); }

std::string ToyJobJson(const std::string& name, int epochs, int world) {
  return absl::Substitute(R"({
  "name": "$0",
  "layers": [
    {"kind": "LINEAR", "inFeatures": 1, "outFeatures": 50},
    {"kind": "RELU"},
    {"kind": "LINEAR", "inFeatures": 50, "outFeatures": 1}
  ],
  "head": {"regression": {}},
  "data": {"kind": "TOY_CUBIC", "toyTrainSize": 40, "toyTestSize": 20},
  "noise": {"sigmaV": 0.06},
  "batchSize": 10, "epochs": $1, "seed": 7, "worldSize": $2, "device": "cpu"
})",
                          name, epochs, world);
}

std::string HttpReply::Header(const std::string& key) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, key)) return v;
  }
  return "";
}

void RestTest::TearDown() {
  if (!HasFailure()) return;
  std::vector<ChildProcess*> all;
  if (coordinator_ != nullptr) all.push_back(coordinator_.get());
  for (auto& w : workers_) all.push_back(w.get());
  for (ChildProcess* p : all) {
    std::cerr << "---- " << p->name() << " (pid " << p->Pid() << ") stderr:\n"
              << Tail(p->Stderr(), 6000) << "\n";
  }
}

void RestTest::StartCoordinator(int world, std::vector<std::string> flags) {
  const std::string http_port_file = dir_.File("coordinator.http-port");
  CoordinatorLaunch launch;
  launch.flags = {"--world",     std::to_string(world), "--http",
                  "127.0.0.1:0", "--http-port-file",    http_port_file};
  launch.flags.insert(launch.flags.end(), flags.begin(), flags.end());
  StartedCoordinator c = testing::StartCoordinator(BinPath("tagi-coordinator"), dir_, launch);
  coordinator_ = std::move(c.process);
  ASSERT_TRUE(c.ok()) << "the coordinator did not start: " << c.error;
  grpc_address_ = c.address;
  // The coordinator writes the HTTP port before the gRPC one.
  http_port_ = ReadPort(http_port_file);
  ASSERT_GT(http_port_, 0) << "no HTTP port in " << http_port_file;
}

void RestTest::RunToyJobToSuccess(const std::string& name, int epochs, tagi::v1::Job* done) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  StartWorker();
  const HttpReply submitted = Post("/v1/jobs", ToyJobJson(name, epochs));
  ASSERT_EQ(submitted.status, 201) << submitted.body;
  const std::string id = ParseJob(submitted)->id();
  const auto job = WaitForJob(
      id, [](const tagi::v1::Job& j) { return j.state() >= tagi::v1::SUCCEEDED; },
      absl::Seconds(90));
  ASSERT_TRUE(job.has_value());
  ASSERT_EQ(job->state(), tagi::v1::SUCCEEDED) << job->reason();
  *done = *job;
}

ChildProcess& RestTest::StartWorker() {
  const std::vector<std::string> argv = {
      BinPath("tagi-worker"), "--coord", grpc_address_,          "--threads", "1",
      "--connect-timeout",    "20s",     "--collective-timeout", "20s"};
  workers_.push_back(
      std::make_unique<ChildProcess>(argv, dir_, absl::StrCat("worker", workers_.size() + 1)));
  return *workers_.back();
}

HttpReply RestTest::Request(const std::string& method, const std::string& path,
                            const std::string& body, const std::string& content_type) {
  httplib::Client client("127.0.0.1", http_port_);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(20));
  client.set_write_timeout(std::chrono::seconds(20));
  httplib::Request req;
  req.method = method;
  req.path = path;
  req.body = body;
  if (!content_type.empty() && !body.empty()) req.set_header("Content-Type", content_type);
  auto result = client.send(req);
  HttpReply reply;
  if (!result) {
    reply.body = "transport error: " + httplib::to_string(result.error());
    return reply;
  }
  reply.status = result->status;
  reply.body = result->body;
  reply.headers = result->headers;
  return reply;
}

std::string RestTest::SendRaw(const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(http_port_));
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size())) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    while (absl::Now() < deadline && ::poll(&p, 1, 100) >= 0) {
      if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return out;
}

void RestTest::ExpectError(const HttpReply& reply, int status, const std::string& code,
                           const std::string& message_part) {
  EXPECT_EQ(reply.status, status) << reply.body;
  EXPECT_THAT(reply.Header("Content-Type"), ::testing::StartsWith("application/json"));
  google::protobuf::Struct error;
  const auto st = google::protobuf::util::JsonStringToMessage(reply.body, &error);
  ASSERT_TRUE(st.ok()) << "the error body is not JSON: " << st << "\n" << reply.body;
  const auto& fields = error.fields();
  EXPECT_EQ(fields.size(), 2u) << reply.body;
  ASSERT_TRUE(fields.contains("code") && fields.contains("message")) << reply.body;
  EXPECT_EQ(fields.at("code").string_value(), code) << reply.body;
  EXPECT_THAT(fields.at("message").string_value(), ::testing::HasSubstr(message_part));
}

void RestTest::ExpectServing() {
  const HttpReply health = Get("/healthz");
  EXPECT_EQ(health.status, 200) << health.body;
  const HttpReply jobs = Get("/v1/jobs");
  EXPECT_EQ(jobs.status, 200) << jobs.body;
  EXPECT_TRUE(coordinator_->Alive()) << "the coordinator died";
}

std::optional<tagi::v1::Job> RestTest::ParseJob(const HttpReply& reply) {
  tagi::v1::Job job;
  const auto st = google::protobuf::util::JsonStringToMessage(reply.body, &job);
  EXPECT_TRUE(st.ok()) << "not a Job: " << st << "\n" << reply.body;
  if (!st.ok()) return std::nullopt;
  return job;
}

std::optional<tagi::v1::Job> RestTest::WaitForJob(
    const std::string& id, const std::function<bool(const tagi::v1::Job&)>& done,
    absl::Duration timeout) {
  std::optional<tagi::v1::Job> last;
  WaitUntil(
      [&] {
        const HttpReply reply = Get("/v1/jobs/" + id);
        if (reply.status != 200) {
          ADD_FAILURE() << "GET /v1/jobs/" << id << ": " << reply.status << " " << reply.body;
          return true;
        }
        last = ParseJob(reply);
        return !last.has_value() || done(*last);
      },
      timeout, absl::Milliseconds(100));
  return last;
}

bool RestTest::WaitForIdleWorkers(int n, absl::Duration timeout) {
  return WaitUntil(
      [&] {
        const HttpReply reply = Get("/v1/workers");
        tagi::v1::ListWorkersResponse workers;
        if (reply.status != 200 ||
            !google::protobuf::util::JsonStringToMessage(reply.body, &workers).ok()) {
          return false;
        }
        int idle = 0;
        for (const auto& w : workers.workers()) idle += w.state() == "IDLE";
        return idle == n;
      },
      timeout, absl::Milliseconds(100));
}

}  // namespace tagi::testing
