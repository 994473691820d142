// RestGateway: the REST/JSON face of the Coordinator, next to the gRPC one
// (services.h). Request and response bodies are the tagi.v1 protobuf
// messages in the proto3 JSON mapping; every call goes to the same
// Coordinator method the gRPC handler calls, so validation and error
// messages exist once. docs/openapi.yaml describes the routes, and
// tests/rest keeps the two in step.
//
//   POST /v1/jobs                 JobSpec or SubmitJobRequest -> 201 Job
//   GET  /v1/jobs                 -> ListJobsResponse
//   GET  /v1/jobs/{id}            -> Job
//   POST /v1/jobs/{id}:cancel     -> Job
//   GET  /v1/jobs/{id}/model      -> the model file (application/octet-stream)
//   GET  /v1/workers              -> ListWorkersResponse
//   GET  /healthz, /readyz        -> "ok" (readyz: 503 while not ready)
//   GET  /metrics                 -> Prometheus text format 0.0.4
//
// Every error is {"code": "NOT_FOUND", "message": "..."} with the HTTP
// status of HttpStatusFromCode; a known path with a method it does not
// serve is 405 with an Allow header, an unknown path 404, a body over
// max_body_bytes 413, a POST body that is not application/json 415.
//
// Bounded: handlers wait on nothing but the Coordinator's lock (the calls
// used here have no long polls), a model file read from the state dir, and
// the callbacks given to the constructor; sockets have read and write
// timeouts; each connection carries one request (httplib 0.11 leaves the
// body of a GET unread, which would corrupt a kept-alive connection). The
// server runs on its own pool of `threads` threads.
// Handlers run concurrently (the Coordinator is thread-safe); Bind, Start
// and Stop are called by one owner thread.
#ifndef TAGI_COORDINATOR_REST_GATEWAY_H_
#define TAGI_COORDINATOR_REST_GATEWAY_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/auth.h"
#include "common/refusal_log.h"
#include "coordinator/coordinator.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tagi::coordinator {

// The one mapping from a status code to an HTTP status:
//   INVALID_ARGUMENT, OUT_OF_RANGE -> 400    UNAUTHENTICATED -> 401
//   PERMISSION_DENIED -> 403                 NOT_FOUND -> 404
//   FAILED_PRECONDITION, ABORTED, ALREADY_EXISTS -> 409 (the request is
//     well formed but the resource's state refuses it: cancelling a job
//     that is over, the model of a job that has not succeeded)
//   RESOURCE_EXHAUSTED -> 429   CANCELLED -> 499   UNIMPLEMENTED -> 501
//   UNAVAILABLE -> 503          DEADLINE_EXCEEDED -> 504   others -> 500
int HttpStatusFromCode(absl::StatusCode code);

// {"code": "INVALID_ARGUMENT", "message": "..."}: the code's canonical name
// and the message, escaped (bytes that are not UTF-8 become U+FFFD).
std::string ErrorJson(const absl::Status& status);

// A served route: the method and the path as docs/openapi.yaml writes it
// ("/v1/jobs/{id}:cancel").
struct RestRoute {
  std::string method;
  std::string path;
};

struct RestOptions {
  size_t max_body_bytes = size_t{1} << 20;  // larger request bodies are 413
  absl::Duration read_timeout = absl::Seconds(5);
  absl::Duration write_timeout = absl::Seconds(10);
  int threads = 8;
  // Not empty: every /v1 route needs "Authorization: Bearer <token>" with
  // one of these; a request without a valid one is 401 UNAUTHENTICATED
  // with "WWW-Authenticate: Bearer" and changes nothing. /healthz, /readyz
  // and /metrics stay open.
  TokenSet api_tokens;
  // Both set: serve HTTPS with this PEM certificate chain and key.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Rate-limits the log lines of refused requests; not owned; null logs each.
  RefusalLog* refusals = nullptr;
};

class RestGateway {
 public:
  // `metrics` returns the Prometheus text for GET /metrics; `ready` is OK
  // when the coordinator can serve (GET /readyz answers 503 with its
  // message otherwise). Both are called on server threads and must be
  // thread-safe and bounded. `coordinator` must outlive this object.
  RestGateway(Coordinator& coordinator, std::function<std::string()> metrics,
              std::function<absl::Status()> ready, RestOptions options = {});
  ~RestGateway();  // Stop()
  RestGateway(const RestGateway&) = delete;
  RestGateway& operator=(const RestGateway&) = delete;

  // Every route the gateway serves (HEAD is served wherever GET is).
  static std::vector<RestRoute> Routes();

  // Binds and listens on "host:port" ("[v6]:port" too; port 0 picks a free
  // one) and returns the port. A port in use is FailedPrecondition: the
  // socket does not share ports (no SO_REUSEPORT). REQUIRES: called once.
  absl::StatusOr<int> Bind(const std::string& address);
  // Serves on a background thread. REQUIRES: Bind succeeded.
  void Start();
  // Closes the listening socket and joins the server's threads (in-flight
  // requests finish, bounded by the socket timeouts). Idempotent.
  void Stop();

 private:
  using Handler = void (RestGateway::*)(const httplib::Request&, httplib::Response&);
  struct RouteDef {
    const char* method;
    const char* path;  // "{id}" stands for one path segment without ':'
    Handler handler;
  };
  struct Route;

  // The one table of routes: the server and Routes() read it.
  static const std::vector<RouteDef>& Table();
  void AddRoute(const RouteDef& def);
  // Answers what must not reach httplib's routing (true when it did).
  bool PreRoute(const httplib::Request& req, httplib::Response& res);
  // Routes a request that carries no body without letting httplib read one.
  void DispatchBodiless(const httplib::Request& req, httplib::Response& res);
  // Rewrites httplib's bodiless errors (no route, 413, ...) as JSON errors;
  // turns "no route" into 405 where the path exists with other methods.
  void FillError(const httplib::Request& req, httplib::Response& res) const;
  // Runs `handler` when the request may use the route (see
  // RestOptions::api_tokens), answers 401 otherwise.
  void Guarded(Handler handler, const httplib::Request& req, httplib::Response& res);

  void SubmitJob(const httplib::Request& req, httplib::Response& res);
  void ListJobs(const httplib::Request& req, httplib::Response& res);
  void GetJob(const httplib::Request& req, httplib::Response& res);
  void CancelJob(const httplib::Request& req, httplib::Response& res);
  void GetModel(const httplib::Request& req, httplib::Response& res);
  void ListWorkers(const httplib::Request& req, httplib::Response& res);
  void Healthz(const httplib::Request& req, httplib::Response& res);
  void Readyz(const httplib::Request& req, httplib::Response& res);
  void Metrics(const httplib::Request& req, httplib::Response& res);

  Coordinator& c_;
  const std::function<std::string()> metrics_;
  const std::function<absl::Status()> ready_;
  const RestOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::vector<Route> routes_;  // filled by the constructor, read-only after
  std::thread thread_;
  absl::Notification listen_done_;
  bool started_ = false;  // owner thread only
};

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_REST_GATEWAY_H_
