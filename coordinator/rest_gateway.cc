#include "coordinator/rest_gateway.h"

#include <google/protobuf/empty.pb.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <regex>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/job_spec.h"

namespace tagi::coordinator {

struct RestGateway::Route {
  std::string method;
  std::regex pattern;
  Handler handler;
};

namespace {

constexpr char kJsonType[] = "application/json";
constexpr char kTextType[] = "text/plain; charset=utf-8";
constexpr char kMetricsType[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr size_t kDownloadChunkBytes = size_t{1} << 20;
// httplib refuses form-encoded bodies above this size itself (with 413).
constexpr size_t kFormBodyLimit = 8192;

// The length of the UTF-8 sequence starting at s[i], or 0 if it is not one.
size_t Utf8Length(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) >> 6) != 0x2) return 0;
  }
  return n;
}

void AppendJsonString(absl::string_view s, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else if (const size_t n = Utf8Length(s, i); n > 0) {
      out.append(s.data() + i, n);
      i += n;
      continue;
    } else {
      out += "\\ufffd";
    }
    ++i;
  }
  out += '"';
}

void SendError(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusFromCode(status.code());
  res.set_content(ErrorJson(status), kJsonType);
}

// For errors that are HTTP's own (405, 413, 415): the HTTP status is given,
// the code names the closest canonical one.
void SendError(httplib::Response& res, int http_status, const absl::Status& status) {
  res.status = http_status;
  res.set_content(ErrorJson(status), kJsonType);
}

google::protobuf::util::JsonParseOptions StrictParse() {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  return options;
}

void SendMessage(httplib::Response& res, const google::protobuf::Message& message,
                 int http_status = 200) {
  std::string json;
  const auto st = google::protobuf::util::MessageToJsonString(message, &json);
  if (!st.ok()) {
    SendError(res, absl::InternalError(
                       absl::StrCat("cannot print the reply as JSON: ", st.message().as_string())));
    return;
  }
  res.status = http_status;
  res.set_content(json + "\n", kJsonType);
}

template <typename T>
void Reply(httplib::Response& res, const absl::StatusOr<T>& result) {
  if (!result.ok()) return SendError(res, result.status());
  SendMessage(res, *result);
}

// Every route takes its input from the path and the body only.
bool RefuseQuery(const httplib::Request& req, httplib::Response& res) {
  if (req.params.empty()) return false;
  SendError(res, absl::InvalidArgumentError(
                     absl::StrFormat("%s %s takes no query parameters (got \"%s\")", req.method,
                                     req.path, req.params.begin()->first)));
  return true;
}

// A non-empty body must be declared JSON (415 otherwise).
bool RefuseContentType(const httplib::Request& req, httplib::Response& res) {
  if (req.body.empty()) return false;
  const std::string type = req.get_header_value("Content-Type");
  std::string media = absl::AsciiStrToLower(type.substr(0, type.find(';')));
  absl::StripAsciiWhitespace(&media);
  if (media == kJsonType) return false;
  SendError(res, 415,
            absl::InvalidArgumentError(absl::StrFormat(
                "the body's Content-Type is \"%s\"; send JSON with \"Content-Type: %s\"", type,
                kJsonType)));
  return true;
}

// The body of POST /v1/jobs: a JobSpec, or a SubmitJobRequest ({"spec":
// JobSpec}) as the gRPC call takes; told apart by a top-level "spec" key,
// which JobSpec does not have.
absl::StatusOr<tagi::v1::JobSpec> ParseSubmitBody(const std::string& body) {
  constexpr char kExpected[] = "expected a JobSpec, or {\"spec\": JobSpec}, as JSON";
  if (absl::StripAsciiWhitespace(body).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the body is empty; ", kExpected));
  }
  google::protobuf::Value value;
  if (auto st = google::protobuf::util::JsonStringToMessage(body, &value); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the body is not valid JSON: ", st.message().as_string()));
  }
  if (value.kind_case() != google::protobuf::Value::kStructValue) {
    return absl::InvalidArgumentError(absl::StrCat("the body is not a JSON object; ", kExpected));
  }
  if (value.struct_value().fields().count("spec") == 0) return ParseJobSpecJson(body);
  tagi::v1::SubmitJobRequest request;
  if (auto st = google::protobuf::util::JsonStringToMessage(body, &request, StrictParse());
      !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the body is not valid SubmitJobRequest JSON: ", st.message().as_string()));
  }
  return request.spec();
}

// The methods whose body httplib reads before routing.
bool HttplibReadsBody(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE" ||
         method == "PRI";
}

// A name for Content-Disposition: the id with anything unusual replaced.
std::string DownloadName(const std::string& id) {
  std::string name = id;
  for (char& ch : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') ch = '_';
  }
  return name + ".tagi";
}

}  // namespace

int HttpStatusFromCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorJson(const absl::Status& status) {
  std::string out = "{\"code\": ";
  AppendJsonString(absl::StatusCodeToString(status.code()), out);
  out += ", \"message\": ";
  AppendJsonString(status.message(), out);
  out += "}\n";
  return out;
}

namespace {

std::unique_ptr<httplib::Server> MakeServer(const RestOptions& options) {
  if (options.tls_cert_file.empty()) return std::make_unique<httplib::Server>();
  return std::make_unique<httplib::SSLServer>(options.tls_cert_file.c_str(),
                                              options.tls_key_file.c_str());
}

}  // namespace

RestGateway::RestGateway(Coordinator& coordinator, std::function<std::string()> metrics,
                         std::function<absl::Status()> ready, RestOptions options)
    : c_(coordinator),
      metrics_(std::move(metrics)),
      ready_(std::move(ready)),
      options_(options),
      server_(MakeServer(options_)) {
  const int threads = std::max(1, options_.threads);
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // httplib's default also sets SO_REUSEPORT, which would let a second
  // server share a busy port silently.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_read_timeout(absl::ToChronoMicroseconds(options_.read_timeout));
  server_->set_write_timeout(absl::ToChronoMicroseconds(options_.write_timeout));
  // One request per connection. httplib 0.11 leaves the body of a GET (HEAD,
  // OPTIONS, TRACE) unread, and its bytes would be parsed as the next
  // request on a kept-alive connection; closing after each reply makes
  // that impossible, at the price of a connection per request, which a
  // control-plane API can afford.
  server_->set_keep_alive_max_count(1);
  server_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours
        FillError(req, res);
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return PreRoute(req, res) ? httplib::Server::HandlerResponse::Handled
                              : httplib::Server::HandlerResponse::Unhandled;
  });
  server_->set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
        SendError(res, absl::InternalError(
                           absl::StrFormat("internal error serving %s %s", req.method, req.path)));
      });

  for (const RouteDef& def : Table()) AddRoute(def);
}

RestGateway::~RestGateway() { Stop(); }

const std::vector<RestGateway::RouteDef>& RestGateway::Table() {
  static const auto* const table = new std::vector<RouteDef>{
      {"POST", "/v1/jobs", &RestGateway::SubmitJob},
      {"GET", "/v1/jobs", &RestGateway::ListJobs},
      {"GET", "/v1/jobs/{id}", &RestGateway::GetJob},
      {"POST", "/v1/jobs/{id}:cancel", &RestGateway::CancelJob},
      {"GET", "/v1/jobs/{id}/model", &RestGateway::GetModel},
      {"GET", "/v1/workers", &RestGateway::ListWorkers},
      {"GET", "/healthz", &RestGateway::Healthz},
      {"GET", "/readyz", &RestGateway::Readyz},
      {"GET", "/metrics", &RestGateway::Metrics},
  };
  return *table;
}

std::vector<RestRoute> RestGateway::Routes() {
  std::vector<RestRoute> routes;
  for (const RouteDef& def : Table()) routes.push_back({def.method, def.path});
  return routes;
}

void RestGateway::AddRoute(const RouteDef& def) {
  const std::string pattern = absl::StrReplaceAll(def.path, {{"{id}", "([^/:]+)"}});
  const Handler handler = def.handler;
  auto fn = [this, handler](const httplib::Request& req, httplib::Response& res) {
    Guarded(handler, req, res);
  };
  if (std::string(def.method) == "GET") {
    server_->Get(pattern, fn);  // httplib serves HEAD with it too
  } else {                      // the table holds GET and POST routes only
    server_->Post(pattern, fn);
  }
  routes_.push_back(Route{def.method, std::regex(pattern), handler});
}

void RestGateway::Guarded(Handler handler, const httplib::Request& req, httplib::Response& res) {
  if (options_.api_tokens.required() && absl::StartsWith(req.path, "/v1/")) {
    const std::string header = req.get_header_value("Authorization");
    const std::string token = BearerToken(header);
    if (token.empty() || !options_.api_tokens.Accepts(token)) {
      LogRefusal(options_.refusals, "tagi-coordinator", req.remote_addr,
                 absl::StrCat(req.method, " ", req.path, ": ",
                              header.empty() ? "no Authorization header" : "invalid API token"));
      res.set_header("WWW-Authenticate", "Bearer realm=\"tagi\"");
      return SendError(res, absl::UnauthenticatedError(
                                header.empty()
                                    ? "this coordinator requires an API token: send "
                                      "\"Authorization: Bearer <token>\""
                                    : "the API token is not valid"));
    }
  }
  (this->*handler)(req, res);
}

bool RestGateway::PreRoute(const httplib::Request& req, httplib::Response& res) {
  // httplib 0.11 reads the body of a POST (PUT, ...) that has neither a
  // Content-Length nor a Transfer-Encoding until the client closes the
  // connection, then answers 400; such a request has no body (RFC 9112
  // section 6.3), so it is answered here, before httplib reads anything.
  if (!HttplibReadsBody(req.method) || req.has_header("Content-Length") ||
      req.has_header("Transfer-Encoding")) {
    return false;
  }
  DispatchBodiless(req, res);
  return true;
}

void RestGateway::DispatchBodiless(const httplib::Request& req, httplib::Response& res) {
  httplib::Request copy = req;  // the handlers read the path's groups from matches
  for (const Route& route : routes_) {
    if (route.method == copy.method && std::regex_match(copy.path, copy.matches, route.pattern)) {
      return Guarded(route.handler, copy, res);
    }
  }
  res.status = 404;
  FillError(req, res);
}

void RestGateway::FillError(const httplib::Request& req, httplib::Response& res) const {
  // A request no handler took arrives here as 404 (a method httplib routes
  // but no route for it) or 400 (a method httplib has no table for, like
  // TRACE, or does not know at all, like QUERY: then only the raw target is
  // parsed).
  const bool routed_method = req.method == "GET" || req.method == "HEAD" ||
                             req.method == "OPTIONS" || HttplibReadsBody(req.method);
  const bool unrouted = res.status == 404 || (res.status == 400 && !routed_method &&
                                              absl::StartsWith(req.version, "HTTP/"));
  if (unrouted) {
    const std::string path =
        req.path.empty() ? req.target.substr(0, req.target.find('?')) : req.path;
    std::set<std::string> allowed;
    for (const Route& route : routes_) {
      if (std::regex_match(path, route.pattern)) allowed.insert(route.method);
    }
    if (allowed.contains("GET")) allowed.insert("HEAD");
    if (!allowed.empty()) {
      const std::string allow = absl::StrJoin(allowed, ", ");
      res.set_header("Allow", allow);
      return SendError(res, 405,
                       absl::UnimplementedError(absl::StrFormat(
                           "%s is not served on %s; allowed: %s", req.method, path, allow)));
    }
    return SendError(
        res, 404,
        absl::NotFoundError(absl::StrFormat("no such path: %s (see docs/openapi.yaml)", path)));
  }
  if (res.status == 400) {
    return SendError(res, absl::InvalidArgumentError(absl::StrFormat(
                              "malformed HTTP request (%s %s)", req.method, req.path)));
  }
  if (res.status == 413) {
    const bool form = absl::StrContains(req.get_header_value("Content-Type"),
                                        "application/x-www-form-urlencoded");
    return SendError(
        res, 413,
        absl::InvalidArgumentError(
            form ? absl::StrFormat("a form-encoded body is limited to %d bytes; send the job as "
                                   "JSON with \"Content-Type: %s\"",
                                   kFormBodyLimit, kJsonType)
                 : absl::StrFormat("the body exceeds the limit of %d bytes",
                                   options_.max_body_bytes)));
  }
  if (res.status == 414) {
    return SendError(res, 414, absl::InvalidArgumentError("the request URI is too long"));
  }
  SendError(
      res, res.status,
      absl::UnknownError(absl::StrFormat("HTTP %d for %s %s", res.status, req.method, req.path)));
}

absl::StatusOr<int> RestGateway::Bind(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("\"%s\" is not HOST:PORT with a port in 0..65535", address));
  }
  if (!server_->is_valid()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot serve HTTPS with --tls-cert %s and --tls-key %s (unreadable, or not a matching "
        "PEM pair)",
        options_.tls_cert_file, options_.tls_key_file));
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const int bound =
      port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot listen on %s (is the address local and the port free?)", address));
  }
  return bound;
}

void RestGateway::Start() {
  started_ = true;
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_done_.Notify();
  });
}

void RestGateway::Stop() {
  if (!started_) return;
  started_ = false;
  // stop() is a no-op until the accept loop runs; repeat until it ended.
  do {
    server_->stop();
  } while (!listen_done_.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  thread_.join();
}

void RestGateway::SubmitJob(const httplib::Request& req, httplib::Response& res) {
  if (RefuseContentType(req, res) || RefuseQuery(req, res)) return;
  auto spec = ParseSubmitBody(req.body);
  if (!spec.ok()) return SendError(res, spec.status());
  auto job = c_.Submit(*spec);
  if (!job.ok()) return SendError(res, job.status());
  res.set_header("Location", "/v1/jobs/" + job->id());
  SendMessage(res, *job, 201);
}

void RestGateway::ListJobs(const httplib::Request& req, httplib::Response& res) {
  if (RefuseQuery(req, res)) return;
  tagi::v1::ListJobsResponse reply;
  for (auto& job : c_.List()) *reply.add_jobs() = std::move(job);
  SendMessage(res, reply);
}

void RestGateway::GetJob(const httplib::Request& req, httplib::Response& res) {
  if (RefuseQuery(req, res)) return;
  Reply(res, c_.Get(req.matches[1]));
}

void RestGateway::CancelJob(const httplib::Request& req, httplib::Response& res) {
  if (RefuseContentType(req, res) || RefuseQuery(req, res)) return;
  // The id is in the path; a body, if any, must be the empty object.
  google::protobuf::Empty empty;
  if (!absl::StripAsciiWhitespace(req.body).empty()) {
    if (auto st = google::protobuf::util::JsonStringToMessage(req.body, &empty, StrictParse());
        !st.ok()) {
      return SendError(res, absl::InvalidArgumentError(absl::StrCat("cancel takes no body or {}; ",
                                                                    st.message().as_string())));
    }
  }
  Reply(res, c_.Cancel(req.matches[1]));
}

void RestGateway::GetModel(const httplib::Request& req, httplib::Response& res) {
  if (RefuseQuery(req, res)) return;
  const std::string id = req.matches[1];
  auto bytes = c_.ModelFile(id);
  if (!bytes.ok()) return SendError(res, bytes.status());
  res.set_header("Content-Disposition",
                 absl::StrCat("attachment; filename=\"", DownloadName(id), "\""));
  if (bytes->empty()) {
    res.set_content("", "application/octet-stream");
    return;
  }
  auto data = std::make_shared<const std::string>(std::move(*bytes));
  res.set_content_provider(data->size(), "application/octet-stream",
                           [data](size_t offset, size_t length, httplib::DataSink& sink) {
                             return sink.write(data->data() + offset,
                                               std::min(length, kDownloadChunkBytes));
                           });
}

void RestGateway::ListWorkers(const httplib::Request& req, httplib::Response& res) {
  if (RefuseQuery(req, res)) return;
  tagi::v1::ListWorkersResponse reply;
  for (auto& w : c_.ListWorkers()) *reply.add_workers() = std::move(w);
  SendMessage(res, reply);
}

void RestGateway::Healthz(const httplib::Request& req, httplib::Response& res) {
  if (RefuseQuery(req, res)) return;
  res.set_content("ok\n", kTextType);
}

void RestGateway::Readyz(const httplib::Request& req, httplib::Response& res) {
  if (RefuseQuery(req, res)) return;
  const absl::Status st = ready_();
  if (!st.ok()) return SendError(res, 503, st);
  res.set_content("ok\n", kTextType);
}

void RestGateway::Metrics(const httplib::Request& req, httplib::Response& res) {
  if (RefuseQuery(req, res)) return;
  res.set_content(metrics_(), kMetricsType);
}

}  // namespace tagi::coordinator
