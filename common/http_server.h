// HttpServer: an HTTP/1.1 server for untrusted clients, on GNU
// libmicrohttpd's event loops.
//
// Why not cpp-httplib (which the REST gateway used before): it gives each
// connection a thread from a fixed pool for as long as the connection is
// open, so eight clients that send one byte every two seconds take every
// thread and /healthz stops answering; it reads a chunked body whole before
// the size limit applies; it accepts headers of any size. Here:
//   - a few event-loop threads (`threads`) serve every connection, so idle
//     or trickling connections cost a socket and a little memory, no thread;
//   - connections are bounded in total and per client address (beyond
//     either, a new connection is closed at once);
//   - the request line and headers must fit in about `max_header_bytes`
//     (libmicrohttpd's per-connection memory pool, which also holds its
//     read buffer; else 431, before any handler runs);
//   - a request must arrive whole (headers and body) within
//     `request_deadline` of the connection's accept, else the connection is
//     shut; a connection that makes no progress for `idle_timeout`, while
//     receiving or sending, is closed;
//   - a body is refused with 413 as soon as it is known to exceed
//     `max_body_bytes`: from its Content-Length before a byte of it is
//     read, or, chunked, at the chunk that crosses the limit;
//   - `screen` sees every request once its headers are in, before any byte
//     of its body is read, and may answer it then (authentication, routing,
//     content type), so a refused request never makes the server buffer
//     its body.
// One request per connection: every response carries "Connection: close".
// Bind, Start and Stop are called by one owner thread; the callbacks run on
// the event-loop threads, concurrently, and must be thread-safe and quick
// (they hold up the other connections of their loop).
#ifndef TAGI_COMMON_HTTP_SERVER_H_
#define TAGI_COMMON_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace tagi {

struct HttpRequest {
  std::string method;
  std::string path;  // percent-decoded, without the query
  std::string version;
  std::string remote_addr;  // numeric host of the client
  std::vector<std::pair<std::string, std::string>> query;    // in order
  std::vector<std::pair<std::string, std::string>> headers;  // in order
  std::string body;
  // True when the request announces a body (Content-Length above 0, or a
  // Transfer-Encoding).
  bool has_body = false;

  // The first header called `name` (any case); empty when absent.
  std::string Header(absl::string_view name) const;
  bool HasHeader(absl::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // When set, the body: served in chunks without a copy (large downloads).
  std::shared_ptr<const std::string> shared_body;

  void SetHeader(std::string name, std::string value);
  void SetContent(std::string content, std::string content_type);
  void SetSharedContent(std::shared_ptr<const std::string> content, std::string content_type);
};

struct HttpServerOptions {
  size_t max_body_bytes = size_t{1} << 20;
  size_t max_header_bytes = size_t{32} << 10;  // request line and headers together
  int max_connections = 1024;
  int max_connections_per_client = 256;
  absl::Duration request_deadline = absl::Seconds(10);  // accept -> request received
  absl::Duration idle_timeout = absl::Seconds(10);      // no progress either way
  int threads = 4;                                      // event loops
  // Both set: serve HTTPS with this PEM certificate chain and key.
  std::string tls_cert_file;
  std::string tls_key_file;
};

// The request deadline while `open` of `max_connections` connections are
// open: `base` up to half full, then shrinking linearly to
// kCrowdedRequestDeadline when full, so that slow clients filling the table
// are cut sooner and a new request still finds a slot. Pure.
inline constexpr absl::Duration kCrowdedRequestDeadline = absl::Milliseconds(500);
absl::Duration EffectiveRequestDeadline(absl::Duration base, int64_t open, int max_connections);

// Query parameters a request may carry. libmicrohttpd parses them into the
// connection's bounded memory pool, and a query of several hundred (well
// within the header limit) exhausted it and left the request unanswered
// until its deadline; one with more is answered 414 as soon as its request
// line is in.
inline constexpr int kMaxQueryParameters = 256;

// Counters since Start, for metrics and tests.
struct HttpServerStats {
  int64_t connections_open = 0;
  uint64_t connections_accepted = 0;
  uint64_t deadline_closed = 0;  // shut for missing request_deadline
  uint64_t bodies_refused = 0;   // 413s for size
  uint64_t uris_refused = 0;     // 414s for more than kMaxQueryParameters
  uint64_t clients_limited = 0;  // 429s for a client over its connections
};

// The stats in the Prometheus text format, each name starting with
// `prefix` (e.g. "tagi_coordinator_http"): connections open (gauge),
// accepted, shut for the request deadline and bodies refused (counters).
std::string HttpStatsText(const HttpServerStats& stats, absl::string_view prefix);

class HttpServer {
 public:
  // Answers a whole request (its body read).
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
  // Sees a request before its body is read (req.body is empty); returns
  // true when it answered in `res` (the body is then never read).
  using Screen = std::function<bool(const HttpRequest&, HttpResponse&)>;
  // Fills `res` for the server's own refusals (413 for size).
  using ErrorWriter = std::function<void(int http_status, const absl::Status&, HttpResponse&)>;

  // `clock` must outlive the server; it times the request deadline.
  HttpServer(HttpServerOptions options, Screen screen, Handler handler, ErrorWriter errors,
             Clock& clock);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens on "host:port" ("[v6]:port" too; port 0 picks a free
  // one; no SO_REUSEPORT, so a busy port is FailedPrecondition) and reads
  // the TLS files; returns the port. REQUIRES: called once.
  absl::StatusOr<int> Bind(const std::string& address);
  // Starts the event loops. FailedPrecondition when they cannot start (for
  // HTTPS: a certificate and key that do not make a pair). REQUIRES: Bind
  // succeeded.
  absl::Status Start();
  // Closes the listening socket and every connection, and joins the
  // threads. Idempotent.
  void Stop();

  HttpServerStats stats();

 private:
  struct Connection;
  struct Exchange;

  friend struct HttpServerCallbacks;  // libmicrohttpd's callbacks (http_server.cc)
  // Queues `res` on `conn`; false when libmicrohttpd refused it.
  bool Queue(MHD_Connection* conn, const HttpResponse& res);
  // The first call for a request: its headers are in.
  bool Begin(MHD_Connection* conn, const char* url, const char* method, const char* version,
             Exchange& ex);
  // A piece of the body.
  bool Receive(MHD_Connection* conn, std::string_view data, Exchange& ex);
  // The whole request is in.
  bool Finish(MHD_Connection* conn, Exchange& ex);
  void Opened(MHD_Connection* conn, Connection*& c);
  void Closed(Connection* c);
  void ReapLoop();

  const HttpServerOptions options_;
  const Screen screen_;
  const Handler handler_;
  const ErrorWriter errors_;
  Clock& clock_;
  int listen_fd_ = -1;
  std::string tls_cert_;
  std::string tls_key_;
  MHD_Daemon* daemon_ = nullptr;
  std::thread reaper_;
  absl::Notification stop_reaper_;

  absl::Mutex mu_;
  std::map<Connection*, absl::Time> receiving_ ABSL_GUARDED_BY(mu_);  // -> accepted at
  // Open connections by client address: past max_connections_per_client a
  // connection is answered 429 (libmicrohttpd's own per-address limit sits
  // kPerClientGrace higher and closes what comes beyond, unanswered).
  std::map<std::string, int> per_client_ ABSL_GUARDED_BY(mu_);
  HttpServerStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tagi

#endif  // TAGI_COMMON_HTTP_SERVER_H_
