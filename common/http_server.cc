#include "common/http_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"

namespace tagi {

namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;  // of a shared body, per read
constexpr size_t kMaxPemBytes = size_t{1} << 20;
// A connection's memory pool beyond max_header_bytes: its read buffer, the
// reply's headers, and an entry of about 64 bytes for each of up to
// kMaxQueryParameters query parameters (with less, a request line near the
// header limit with a few hundred parameters exhausted the pool and was
// left unanswered until its deadline).
constexpr size_t kPoolSlackBytes = (size_t{8} << 10) + 64 * kMaxQueryParameters;
// A body announced over the limit by at most this factor is read and
// dropped before the 413 (see Begin).
constexpr uint64_t kDrainFactor = 16;

std::string NumericHost(const sockaddr* addr) {
  if (addr == nullptr) return "";
  char host[NI_MAXHOST] = {};
  const socklen_t len =
      addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::getnameinfo(addr, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return host;
}

MHD_Result AppendPair(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* out = static_cast<std::vector<std::pair<std::string, std::string>>*>(cls);
  out->emplace_back(key == nullptr ? "" : key, value == nullptr ? "" : value);
  return MHD_YES;
}

ssize_t ReadShared(void* cls, uint64_t pos, char* buf, size_t max) {
  const auto& bytes = **static_cast<std::shared_ptr<const std::string>*>(cls);
  if (pos >= bytes.size()) return MHD_CONTENT_READER_END_OF_STREAM;
  const size_t n = std::min({max, kChunkBytes, bytes.size() - static_cast<size_t>(pos)});
  std::memcpy(buf, bytes.data() + pos, n);
  return static_cast<ssize_t>(n);
}

void FreeShared(void* cls) { delete static_cast<std::shared_ptr<const std::string>*>(cls); }

// The length a request announces for its body: nullopt-like -1 when it
// announces none by Content-Length (chunked, or no body).
int64_t DeclaredLength(const HttpRequest& req) {
  const std::string value = req.Header("Content-Length");
  uint64_t n = 0;
  if (value.empty() || !absl::SimpleAtoi(value, &n)) return -1;
  return static_cast<int64_t>(std::min<uint64_t>(n, uint64_t{1} << 62));
}

}  // namespace

// One TCP connection, from accept to close. libmicrohttpd reports a
// connection closed (Closed, under mu_) before it closes the socket, so
// the reaper's shutdown() under mu_ only ever reaches an open socket.
struct HttpServer::Connection {
  int fd = -1;
  std::string client;       // numeric address
  bool over_limit = false;  // past max_connections_per_client: answered 429
};

// Connections of one client past max_connections_per_client that are still
// accepted, to be answered 429 instead of reset.
int PerClientGrace(int max_per_client) { return std::max(4, max_per_client / 4); }

// One request and its reply.
struct HttpServer::Exchange {
  HttpRequest req;
  bool answered = false;  // a response is queued; the rest of the body is dropped
  bool oversize = false;  // the body crossed max_body_bytes: dropped, 413 at the end
};

// libmicrohttpd's callbacks, with its exact signatures, forwarding to the
// server named by `cls`.
struct HttpServerCallbacks {
  // Percent-decoding of the path and query in place (libmicrohttpd's
  // MHD_OPTION_UNESCAPE_CALLBACK), except that %00 stays as it is: decoded,
  // the NUL ended the C string the server hands on, and GET
  // /v1/jobs/job-1%00anything answered as /v1/jobs/job-1.
  static size_t Unescape(void* /*cls*/, MHD_Connection* /*conn*/, char* s) {
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    char* out = s;
    for (const char* in = s; *in != '\0';) {
      if (in[0] == '%' && in[1] != '\0' && in[2] != '\0') {
        const int hi = hex(in[1]);
        const int lo = hex(in[2]);
        if (hi >= 0 && lo >= 0 && (hi | lo) != 0) {
          *out++ = static_cast<char>(hi * 16 + lo);
          in += 3;
          continue;
        }
      }
      *out++ = *in++;
    }
    *out = '\0';
    return static_cast<size_t>(out - s);
  }

  static MHD_Result OnRequest(void* cls, MHD_Connection* conn, const char* url,
                              const char* method, const char* version, const char* upload_data,
                              size_t* upload_data_size, void** con_cls) {
    auto* self = static_cast<HttpServer*>(cls);
    auto* ex = static_cast<HttpServer::Exchange*>(*con_cls);
    bool ok = true;
    if (ex == nullptr) {
      ex = new HttpServer::Exchange;
      *con_cls = ex;
      ok = self->Begin(conn, url, method, version, *ex);
    } else if (*upload_data_size > 0) {
      ok = self->Receive(conn, std::string_view(upload_data, *upload_data_size), *ex);
      *upload_data_size = 0;
    } else {
      ok = self->Finish(conn, *ex);
    }
    return ok ? MHD_YES : MHD_NO;
  }
  // Sees the request line before libmicrohttpd parses its query: a query
  // of more than kMaxQueryParameters gets a 414 written straight to the
  // socket (plain HTTP; over TLS the connection is only shut), which is
  // then shut, so the parse that would exhaust the pool never answers late.
  static void* OnUri(void* cls, const char* uri, MHD_Connection* conn) {
    const char* q = std::strchr(uri, '?');
    if (q == nullptr) return nullptr;
    int params = 1;
    for (const char* p = q + 1; *p != '\0'; ++p) params += *p == '&' || *p == ';';
    if (params <= kMaxQueryParameters) return nullptr;
    auto* self = static_cast<HttpServer*>(cls);
    const MHD_ConnectionInfo* info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info == nullptr) return nullptr;
    const int fd = info->connect_fd;
    if (self->tls_cert_.empty()) {
      const std::string body = absl::StrFormat(
          "{\"code\":\"INVALID_ARGUMENT\",\"message\":\"the query has %d parameters; at most "
          "%d are accepted\"}",
          params, kMaxQueryParameters);
      const std::string reply = absl::StrFormat(
          "HTTP/1.1 414 URI Too Long\r\nContent-Type: application/json\r\nContent-Length: "
          "%d\r\nConnection: close\r\n\r\n%s",
          body.size(), body);
      (void)!::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    ::shutdown(fd, SHUT_RDWR);
    absl::MutexLock lock(&self->mu_);
    ++self->stats_.uris_refused;
    return nullptr;
  }
  static void OnCompleted(void*, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode) {
    delete static_cast<HttpServer::Exchange*>(*con_cls);
    *con_cls = nullptr;
  }
  static void OnConnection(void* cls, MHD_Connection* conn, void** socket_context,
                           MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<HttpServer*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      HttpServer::Connection* c = nullptr;
      self->Opened(conn, c);
      *socket_context = c;
    } else {
      self->Closed(static_cast<HttpServer::Connection*>(*socket_context));
      *socket_context = nullptr;
    }
  }
};

std::string HttpRequest::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) return value;
  }
  return "";
}

bool HttpRequest::HasHeader(absl::string_view name) const {
  return std::any_of(headers.begin(), headers.end(),
                     [&](const auto& kv) { return absl::EqualsIgnoreCase(kv.first, name); });
}

void HttpResponse::SetHeader(std::string name, std::string value) {
  for (auto& kv : headers) {
    if (absl::EqualsIgnoreCase(kv.first, name)) {
      kv.second = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::move(name), std::move(value));
}

void HttpResponse::SetContent(std::string content, std::string content_type) {
  body = std::move(content);
  shared_body.reset();
  SetHeader("Content-Type", std::move(content_type));
}

void HttpResponse::SetSharedContent(std::shared_ptr<const std::string> content,
                                    std::string content_type) {
  body.clear();
  shared_body = std::move(content);
  SetHeader("Content-Type", std::move(content_type));
}

std::string HttpStatsText(const HttpServerStats& stats, absl::string_view prefix) {
  std::string out;
  const auto add = [&](absl::string_view name, absl::string_view type, absl::string_view help,
                       double value) {
    absl::StrAppendFormat(&out, "# HELP %s_%s %s\n# TYPE %s_%s %s\n%s_%s %.17g\n", prefix, name,
                          help, prefix, name, type, prefix, name, value);
  };
  add("connections_open", "gauge", "Open HTTP connections.",
      static_cast<double>(stats.connections_open));
  add("connections_accepted_total", "counter", "HTTP connections accepted.",
      static_cast<double>(stats.connections_accepted));
  add("clients_limited_total", "counter",
      "Requests answered 429 because their client held too many connections.",
      static_cast<double>(stats.clients_limited));
  add("uris_refused_total", "counter",
      "Requests answered 414 for more query parameters than are accepted.",
      static_cast<double>(stats.uris_refused));
  add("deadline_closed_total", "counter",
      "HTTP connections shut because their request did not arrive whole in time.",
      static_cast<double>(stats.deadline_closed));
  add("bodies_refused_total", "counter", "HTTP requests refused with 413 for their body's size.",
      static_cast<double>(stats.bodies_refused));
  return out;
}

HttpServer::HttpServer(HttpServerOptions options, Screen screen, Handler handler,
                       ErrorWriter errors, Clock& clock)
    : options_(std::move(options)),
      screen_(std::move(screen)),
      handler_(std::move(handler)),
      errors_(std::move(errors)),
      clock_(clock) {}

HttpServer::~HttpServer() {
  Stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

absl::StatusOr<int> HttpServer::Bind(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("\"%s\" is not HOST:PORT with a port in 0..65535", address));
  }
  if (options_.tls_cert_file.empty() != options_.tls_key_file.empty()) {
    return absl::InvalidArgumentError("HTTPS needs both a certificate and a key file");
  }
  if (!options_.tls_cert_file.empty()) {
    auto cert = ReadFile(options_.tls_cert_file, kMaxPemBytes);
    auto key = ReadFile(options_.tls_key_file, kMaxPemBytes);
    if (!cert.ok() || !key.ok()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "cannot serve HTTPS with certificate %s and key %s: %s", options_.tls_cert_file,
          options_.tls_key_file, (!cert.ok() ? cert.status() : key.status()).message()));
    }
    tls_cert_ = std::move(*cert);
    tls_key_ = std::move(*key);
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot listen on %s: the host does not resolve", address));
  }
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 512) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot listen on %s (is the address local and the port free?)", address));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  listen_fd_ = fd;
  return bound.ss_family == AF_INET6
             ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
             : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
}

absl::Status HttpServer::Start() {
  if (listen_fd_ < 0) return absl::FailedPreconditionError("Start before a successful Bind");
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
  if (!tls_cert_.empty()) flags |= MHD_USE_TLS;
  const auto seconds = [](absl::Duration d) {
    return static_cast<unsigned int>(std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(d, absl::Seconds(1)))));
  };
  MHD_OptionItem tls[] = {
      {MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(tls_key_.c_str())},
      {MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(tls_cert_.c_str())},
      {MHD_OPTION_END, 0, nullptr},
  };
  MHD_OptionItem plain[] = {{MHD_OPTION_END, 0, nullptr}};
  daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &HttpServerCallbacks::OnRequest, this,
      MHD_OPTION_LISTEN_SOCKET, static_cast<MHD_socket>(listen_fd_),
      MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned int>(std::max(1, options_.threads)),
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(std::max(1, options_.max_connections)),
      MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      static_cast<unsigned int>(std::max(1, options_.max_connections_per_client) +
                                PerClientGrace(options_.max_connections_per_client)),
      MHD_OPTION_CONNECTION_TIMEOUT, seconds(options_.idle_timeout),
      // The pool holds the request line and headers, the read buffer and
      // the response's headers; bodies have their own buffers.
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, options_.max_header_bytes + kPoolSlackBytes,
      MHD_OPTION_UNESCAPE_CALLBACK, &HttpServerCallbacks::Unescape, this,
      MHD_OPTION_URI_LOG_CALLBACK, &HttpServerCallbacks::OnUri, this,
      MHD_OPTION_NOTIFY_COMPLETED, &HttpServerCallbacks::OnCompleted,
      this, MHD_OPTION_NOTIFY_CONNECTION,
      &HttpServerCallbacks::OnConnection, this, MHD_OPTION_ARRAY,
      tls_cert_.empty() ? plain : tls, MHD_OPTION_END);
  if (daemon_ == nullptr) {
    return absl::FailedPreconditionError(
        tls_cert_.empty()
            ? "cannot start the HTTP server's event loops"
            : absl::StrFormat("cannot serve HTTPS with certificate %s and key %s (not a "
                              "matching PEM pair?)",
                              options_.tls_cert_file, options_.tls_key_file));
  }
  listen_fd_ = -1;  // the daemon owns it now
  reaper_ = std::thread([this] { ReapLoop(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (daemon_ == nullptr) return;
  MHD_stop_daemon(daemon_);  // closes every connection (OnConnection sees each)
  daemon_ = nullptr;
  stop_reaper_.Notify();
  reaper_.join();
}

HttpServerStats HttpServer::stats() {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::Duration EffectiveRequestDeadline(absl::Duration base, int64_t open, int max_connections) {
  const double fill =
      max_connections > 0 ? static_cast<double>(open) / static_cast<double>(max_connections) : 1.0;
  if (fill <= 0.5 || base <= kCrowdedRequestDeadline) return base;
  const double left = std::max(0.0, (1.0 - fill) / 0.5);  // 1 at half full, 0 when full
  return kCrowdedRequestDeadline + (base - kCrowdedRequestDeadline) * left;
}

void HttpServer::ReapLoop() {
  const absl::Duration period = std::clamp(std::min(options_.request_deadline, kCrowdedRequestDeadline) / 20,
                                           absl::Milliseconds(10), absl::Milliseconds(250));
  while (!stop_reaper_.WaitForNotificationWithTimeout(period)) {
    const absl::Time now = clock_.Now();
    absl::MutexLock lock(&mu_);
    const absl::Duration deadline = EffectiveRequestDeadline(
        options_.request_deadline, stats_.connections_open, options_.max_connections);
    for (auto it = receiving_.begin(); it != receiving_.end();) {
      if (now - it->second < deadline) {
        ++it;
        continue;
      }
      // The event loop sees the connection end and closes it.
      ::shutdown(it->first->fd, SHUT_RDWR);
      ++stats_.deadline_closed;
      it = receiving_.erase(it);
    }
  }
}

void HttpServer::Opened(MHD_Connection* conn, Connection*& c) {
  c = new Connection;
  const MHD_ConnectionInfo* info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (info != nullptr) c->fd = info->connect_fd;
  if (const MHD_ConnectionInfo* addr =
          MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      addr != nullptr) {
    c->client = NumericHost(addr->client_addr);
  }
  absl::MutexLock lock(&mu_);
  ++stats_.connections_accepted;
  ++stats_.connections_open;
  c->over_limit = ++per_client_[c->client] > std::max(1, options_.max_connections_per_client);
  if (c->fd >= 0) receiving_.emplace(c, clock_.Now());
}

void HttpServer::Closed(Connection* c) {
  if (c == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    receiving_.erase(c);
    --stats_.connections_open;
    if (auto it = per_client_.find(c->client); it != per_client_.end() && --it->second <= 0) {
      per_client_.erase(it);
    }
  }
  delete c;
}

bool HttpServer::Queue(MHD_Connection* conn, const HttpResponse& res) {
  MHD_Response* response = nullptr;
  if (res.shared_body != nullptr && !res.shared_body->empty()) {
    response = MHD_create_response_from_callback(
        res.shared_body->size(), kChunkBytes, &ReadShared,
        new std::shared_ptr<const std::string>(res.shared_body), &FreeShared);
  } else {
    response = MHD_create_response_from_buffer(
        res.body.size(), const_cast<char*>(res.body.data()), MHD_RESPMEM_MUST_COPY);
  }
  if (response == nullptr) return false;
  for (const auto& [name, value] : res.headers) {
    MHD_add_response_header(response, name.c_str(), value.c_str());
  }
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
  const MHD_Result queued =
      MHD_queue_response(conn, static_cast<unsigned int>(res.status), response);
  MHD_destroy_response(response);
  return queued == MHD_YES;
}

bool HttpServer::Begin(MHD_Connection* conn, const char* url, const char* method,
                       const char* version, Exchange& ex) {
  HttpRequest& req = ex.req;
  req.method = method == nullptr ? "" : method;
  req.path = url == nullptr ? "" : url;
  req.version = version == nullptr ? "" : version;
  MHD_get_connection_values(conn, MHD_HEADER_KIND, &AppendPair, &req.headers);
  MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, &AppendPair, &req.query);
  if (const MHD_ConnectionInfo* info =
          MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      info != nullptr) {
    req.remote_addr = NumericHost(info->client_addr);
  }
  const int64_t declared = DeclaredLength(req);
  req.has_body = declared > 0 || req.HasHeader("Transfer-Encoding");
  HttpResponse res;
  bool answered = false;
  if (const MHD_ConnectionInfo* info =
          MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
      info != nullptr && info->socket_context != nullptr &&
      static_cast<const Connection*>(info->socket_context)->over_limit) {
    {
      absl::MutexLock lock(&mu_);
      ++stats_.clients_limited;
    }
    errors_(429,
            absl::ResourceExhaustedError(absl::StrFormat(
                "this client holds more than %d connections, the most one client may "
                "(--http-max-connections-per-client): close some, or wait",
                options_.max_connections_per_client)),
            res);
    res.SetHeader("Connection", "close");
    return Queue(conn, res);
  }
  // The pool holds room for the query's entries beyond max_header_bytes
  // (kPoolSlackBytes); the limit on the request line and headers themselves
  // stays max_header_bytes.
  size_t header_bytes = req.method.size() + req.path.size() + req.version.size();
  for (const auto& [name, value] : req.headers) header_bytes += name.size() + value.size() + 4;
  for (const auto& [name, value] : req.query) header_bytes += name.size() + value.size() + 2;
  if (header_bytes > options_.max_header_bytes) {
    errors_(431,
            absl::InvalidArgumentError(absl::StrFormat(
                "the request line and headers take %d bytes; at most %d are accepted",
                header_bytes, options_.max_header_bytes)),
            res);
    return Queue(conn, res);
  }
  try {
    answered = screen_(req, res);
  } catch (...) {
    res = HttpResponse();
    errors_(500, absl::InternalError("internal error screening the request"), res);
    answered = true;
  }
  if (!answered && declared > static_cast<int64_t>(options_.max_body_bytes)) {
    // A client that waits for "100 Continue", or announces a body far over
    // the limit, is answered at once (the connection then closes). Others
    // are already sending: their body is read and dropped so that they see
    // the 413 rather than a reset (Finish answers it).
    if (!absl::EqualsIgnoreCase(req.Header("Expect"), "100-continue") &&
        static_cast<uint64_t>(declared) <= kDrainFactor * options_.max_body_bytes) {
      ex.oversize = true;
      return true;
    }
    errors_(413,
            absl::InvalidArgumentError(
                absl::StrFormat("the body (Content-Length %d) exceeds the limit of %d bytes",
                                declared, options_.max_body_bytes)),
            res);
    absl::MutexLock lock(&mu_);
    ++stats_.bodies_refused;
    answered = true;
  }
  if (!answered) return true;  // read the body (MHD sends 100 Continue when asked)
  ex.answered = true;
  return Queue(conn, res);
}

bool HttpServer::Receive(MHD_Connection*, std::string_view data, Exchange& ex) {
  if (ex.answered || ex.oversize) return true;  // dropped
  if (ex.req.body.size() + data.size() <= options_.max_body_bytes) {
    ex.req.body.append(data);
    return true;
  }
  // libmicrohttpd 0.9 takes no reply in the middle of a body: the rest is
  // read and dropped (memory stays bounded; request_deadline bounds the
  // time), and Finish answers 413.
  ex.oversize = true;
  std::string().swap(ex.req.body);
  return true;
}

bool HttpServer::Finish(MHD_Connection* conn, Exchange& ex) {
  if (const MHD_ConnectionInfo* info =
          MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
      info != nullptr && info->socket_context != nullptr) {
    absl::MutexLock lock(&mu_);
    receiving_.erase(static_cast<Connection*>(info->socket_context));
  }
  if (ex.answered) return true;
  HttpResponse res;
  if (ex.oversize) {
    errors_(413,
            absl::InvalidArgumentError(absl::StrFormat("the body exceeds the limit of %d bytes",
                                                       options_.max_body_bytes)),
            res);
    absl::MutexLock lock(&mu_);
    ++stats_.bodies_refused;
  } else {
    try {
      handler_(ex.req, res);
    } catch (...) {
      res = HttpResponse();
      errors_(500,
              absl::InternalError(
                  absl::StrFormat("internal error serving %s %s", ex.req.method, ex.req.path)),
              res);
    }
  }
  ex.answered = true;
  return Queue(conn, res);
}

}  // namespace tagi
