// The fixture of the REST tests: a private TempDir, a real tagi-coordinator
// with --http on an OS-chosen loopback port, optional real workers, and an
// HTTP client to it. Every process is a ChildProcess owned by the fixture
// (killed and reaped when the test ends, even when it fails); a failed test
// prints their logs. Waits poll with deadlines; nothing sleeps for
// correctness.
#ifndef TAGI_TESTS_REST_REST_FIXTURE_H_
#define TAGI_TESTS_REST_REST_FIXTURE_H_

#include <httplib.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tagi/v1/jobs.pb.h"
#include "tests/testing/child_process.h"
#include "tests/testing/coordinator_process.h"
#include "tests/testing/subprocess.h"

namespace tagi::testing {

std::string BinPath(const std::string& name);     // <build>/bin/<name>
std::string SourcePath(const std::string& name);  // <source>/<name>
std::string ReadSourceFile(const std::string& name);

// The toy regression job (no data files): 1-50-ReLU-1 on generated points.
std::string ToyJobJson(const std::string& name = "toy", int epochs = 2, int world = 1);

// An HTTP response, or the transport error as status 0 with the error in body.
struct HttpReply {
  int status = 0;
  std::string body;
  httplib::Headers headers;
  std::string Header(const std::string& key) const;
};

class RestTest : public ::testing::Test {
 protected:
  void TearDown() override;

  // Starts the coordinator (--world `world`, --http 127.0.0.1:0 and
  // `flags`); a fatal failure when it does not come up.
  void StartCoordinator(int world = 1, std::vector<std::string> flags = {});
  // Starts a worker of the coordinator.
  ChildProcess& StartWorker();

  // One request on a fresh connection; `content_type` empty sends no
  // Content-Type header.
  HttpReply Request(const std::string& method, const std::string& path,
                    const std::string& body = "",
                    const std::string& content_type = "application/json");
  HttpReply Get(const std::string& path) { return Request("GET", path); }
  HttpReply Post(const std::string& path, const std::string& body) {
    return Request("POST", path, body);
  }
  // Writes `bytes` on a new TCP connection and returns everything the
  // server sent until it closed the connection (or 10 s passed).
  std::string SendRaw(const std::string& bytes);

  // Expects an Error body {"code": code, "message": ...} with `status`, the
  // JSON content type and a message containing `message_part`.
  void ExpectError(const HttpReply& reply, int status, const std::string& code,
                   const std::string& message_part);
  // Expects the coordinator to answer GET /healthz and GET /v1/jobs.
  void ExpectServing();

  // The Job in a reply body (nullopt, with a failure, when it is not one).
  std::optional<tagi::v1::Job> ParseJob(const HttpReply& reply);
  // Polls GET /v1/jobs/{id} until `done` holds; returns the last job seen.
  std::optional<tagi::v1::Job> WaitForJob(const std::string& id,
                                          const std::function<bool(const tagi::v1::Job&)>& done,
                                          absl::Duration timeout);
  // Starts the coordinator and one worker, submits ToyJobJson(name, epochs)
  // over REST and waits (90 s at most) for it to succeed; fatal failures
  // otherwise. `done`: the job then.
  void RunToyJobToSuccess(const std::string& name, int epochs, tagi::v1::Job* done);
  // Polls GET /v1/workers until `n` workers are IDLE.
  bool WaitForIdleWorkers(int n, absl::Duration timeout);

  int http_port() const { return http_port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(http_port_); }
  const std::string& grpc_address() const { return grpc_address_; }
  ChildProcess& coordinator() { return *coordinator_; }

  TempDir dir_;  // declared first: outlives the processes that write into it

 private:
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::string grpc_address_;
  int http_port_ = 0;
};

}  // namespace tagi::testing

#endif  // TAGI_TESTS_REST_REST_FIXTURE_H_
