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
// Bounded (common/http_server.h): a few event-loop threads serve every
// connection; connections are limited in total and per client address;
// headers, bodies (of any transfer encoding) and the time to send a request
// have limits; a request is authenticated, routed and its content type
// checked before a byte of its body is read; JSON bodies are checked for
// nesting depth before they are parsed. Handlers wait on nothing but the
// Coordinator's lock, a model file read from the state dir, and the
// callbacks given to the constructor. One request per connection.
// Handlers run concurrently (the Coordinator is thread-safe); Bind, Start
// and Stop are called by one owner thread.
#ifndef TAGI_COORDINATOR_REST_GATEWAY_H_
#define TAGI_COORDINATOR_REST_GATEWAY_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/http_server.h"
#include "common/refusal_log.h"
#include "coordinator/coordinator.h"


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
  // Connections, header and body sizes, deadlines, event loops and TLS
  // (HttpServerOptions; the flags --http-max-connections and friends).
  HttpServerOptions http;
  // Not empty: every /v1 route needs "Authorization: Bearer <token>" with
  // one of these; a request without a valid one is 401 UNAUTHENTICATED
  // with "WWW-Authenticate: Bearer" and changes nothing (its body is never
  // read). /healthz, /readyz and /metrics stay open.
  TokenSet api_tokens;
  // Rate-limits the log lines of refused requests; not owned; null logs each.
  RefusalLog* refusals = nullptr;
  // Serve /healthz, /readyz and /metrics only (the probe listener,
  // --probe-http): every other path is 404.
  bool probes_only = false;
};

class RestGateway {
 public:
  // `metrics` returns the Prometheus text for GET /metrics; `ready` is OK
  // when the coordinator can serve (GET /readyz answers 503 with its
  // message otherwise). Both are called on server threads and must be
  // thread-safe and bounded. `coordinator` must outlive this object.
  RestGateway(Coordinator& coordinator, std::function<std::string()> metrics,
              std::function<absl::Status()> ready, RestOptions options, Clock& clock);
  ~RestGateway();  // Stop()
  RestGateway(const RestGateway&) = delete;
  RestGateway& operator=(const RestGateway&) = delete;

  // Every route the gateway serves (HEAD is served wherever GET is).
  static std::vector<RestRoute> Routes();

  // Binds and listens on "host:port" ("[v6]:port" too; port 0 picks a free
  // one) and returns the port. A port in use is FailedPrecondition: the
  // socket does not share ports (no SO_REUSEPORT). REQUIRES: called once.
  absl::StatusOr<int> Bind(const std::string& address);
  // Serves on background threads. FailedPrecondition when the server
  // cannot start (HTTPS with a certificate and key that do not match).
  // REQUIRES: Bind succeeded.
  absl::Status Start();
  // Closes the listening socket and every connection and joins the
  // server's threads. Idempotent.
  void Stop();

  HttpServerStats stats() { return server_.stats(); }

 private:
  // A route's handler; `id` is the path's {id} segment, if it has one.
  using Handler = void (RestGateway::*)(const HttpRequest&, const std::string& id,
                                        HttpResponse&);
  struct RouteDef {
    const char* method;
    const char* path;  // "{id}" stands for one path segment without ':'
    Handler handler;
    bool takes_body;   // reads a JSON body (POST routes)
    std::vector<std::string> query = {};  // the query parameters it takes
  };
  struct Route;

  // The one table of routes: the server and Routes() read it.
  static const std::vector<RouteDef>& Table();
  // The route for the request's method and path (HEAD finds GET's), with
  // the {id}; null when none.
  const Route* Find(const HttpRequest& req, std::string& id) const;
  // Before the body: answers every request that is refused (no route, 405,
  // 401, a query, a body that is not JSON) and every request without a
  // body; true when it answered.
  bool Screen(const HttpRequest& req, HttpResponse& res);
  // A request whose body has been read.
  void Serve(const HttpRequest& req, HttpResponse& res);
  // 401 when the request may not use /v1 routes; false when it may.
  bool RefuseUnauthenticated(const HttpRequest& req, HttpResponse& res);
  // 404 or 405 (with Allow) for a request no route takes.
  void NoRoute(const HttpRequest& req, HttpResponse& res) const;

  void SubmitJob(const HttpRequest& req, const std::string& id, HttpResponse& res);
  void ListJobs(const HttpRequest& req, const std::string& id, HttpResponse& res);
  void GetJob(const HttpRequest& req, const std::string& id, HttpResponse& res);
  void CancelJob(const HttpRequest& req, const std::string& id, HttpResponse& res);
  void GetModel(const HttpRequest& req, const std::string& id, HttpResponse& res);
  void GetLogs(const HttpRequest& req, const std::string& id, HttpResponse& res);
  // The web UI's files (web_ui.h).
  void GetUiPage(const HttpRequest& req, const std::string& id, HttpResponse& res);
  void GetUiScript(const HttpRequest& req, const std::string& id, HttpResponse& res);
  void GetUiStyle(const HttpRequest& req, const std::string& id, HttpResponse& res);
  void ListWorkers(const HttpRequest& req, const std::string& id, HttpResponse& res);
  void Healthz(const HttpRequest& req, const std::string& id, HttpResponse& res);
  void Readyz(const HttpRequest& req, const std::string& id, HttpResponse& res);
  void Metrics(const HttpRequest& req, const std::string& id, HttpResponse& res);

  Coordinator& c_;
  const std::function<std::string()> metrics_;
  const std::function<absl::Status()> ready_;
  const RestOptions options_;
  std::vector<Route> routes_;  // filled by the constructor, read-only after
  HttpServer server_;
};

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_REST_GATEWAY_H_
