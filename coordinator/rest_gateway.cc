#include "coordinator/rest_gateway.h"

#include <google/protobuf/empty.pb.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <limits>
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
#include "common/json_depth.h"
#include "common/json_string.h"
#include "coordinator/web_ui.h"

namespace tagi::coordinator {

struct RestGateway::Route {
  std::string method;
  std::regex pattern;
  Handler handler;
  bool takes_body;
  std::vector<std::string> query;
};

namespace {

constexpr char kJsonType[] = "application/json";
constexpr char kTextType[] = "text/plain; charset=utf-8";
constexpr char kMetricsType[] = "text/plain; version=0.0.4; charset=utf-8";

void SendError(HttpResponse& res, const absl::Status& status) {
  res.status = HttpStatusFromCode(status.code());
  res.SetContent(ErrorJson(status), kJsonType);
}

// For errors that are HTTP's own (405, 413, 415): the HTTP status is given,
// the code names the closest canonical one.
void SendError(HttpResponse& res, int http_status, const absl::Status& status) {
  res.status = http_status;
  res.SetContent(ErrorJson(status), kJsonType);
}

google::protobuf::util::JsonParseOptions StrictParse() {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  return options;
}

void SendMessage(HttpResponse& res, const google::protobuf::Message& message,
                 int http_status = 200) {
  std::string json;
  const auto st = google::protobuf::util::MessageToJsonString(message, &json);
  if (!st.ok()) {
    SendError(res, absl::InternalError(
                       absl::StrCat("cannot print the reply as JSON: ", st.message().as_string())));
    return;
  }
  res.status = http_status;
  res.SetContent(json + "\n", kJsonType);
}

template <typename T>
void Reply(HttpResponse& res, const absl::StatusOr<T>& result) {
  if (!result.ok()) return SendError(res, result.status());
  SendMessage(res, *result);
}

// A route takes its input from the path, the body and the query
// parameters it names, each at most once.
bool RefuseQuery(const HttpRequest& req, HttpResponse& res, const std::vector<std::string>& allowed) {
  std::set<std::string> seen;
  for (const auto& [name, value] : req.query) {
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      SendError(res, absl::InvalidArgumentError(
                         allowed.empty()
                             ? absl::StrFormat("%s %s takes no query parameters (got \"%s\")",
                                               req.method, req.path, name)
                             : absl::StrFormat("%s %s takes the query parameters %s (got \"%s\")",
                                               req.method, req.path, absl::StrJoin(allowed, ", "),
                                               name)));
      return true;
    }
    if (!seen.insert(name).second) {
      SendError(res, absl::InvalidArgumentError(
                         absl::StrFormat("query parameter \"%s\" given twice", name)));
      return true;
    }
  }
  return false;
}

// The unsigned integer query parameter `name`; `fallback` when absent.
absl::StatusOr<uint64_t> QueryNumber(const HttpRequest& req, const std::string& name,
                                     uint64_t fallback, uint64_t most) {
  for (const auto& [key, value] : req.query) {
    if (key != name) continue;
    uint64_t n = 0;
    if (value.empty() || value[0] == '-' || !absl::SimpleAtoi(value, &n) || n > most) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "query parameter %s=\"%s\": expected an integer in 0..%d", name, value, most));
    }
    return n;
  }
  return fallback;
}

// A body must be declared JSON (415 otherwise).
bool RefuseContentType(const HttpRequest& req, HttpResponse& res) {
  if (!req.has_body) return false;
  const std::string type = req.Header("Content-Type");
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
  if (auto st = CheckJsonDepth(body); !st.ok()) return st;
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

RestGateway::RestGateway(Coordinator& coordinator, std::function<std::string()> metrics,
                         std::function<absl::Status()> ready, RestOptions options, Clock& clock)
    : c_(coordinator),
      metrics_(std::move(metrics)),
      ready_(std::move(ready)),
      options_(std::move(options)),
      server_(
          options_.http, [this](const HttpRequest& req, HttpResponse& res) { return Screen(req, res); },
          [this](const HttpRequest& req, HttpResponse& res) { Serve(req, res); },
          [](int http_status, const absl::Status& status, HttpResponse& res) {
            SendError(res, http_status, status);
          },
          clock) {
  for (const RouteDef& def : Table()) {
    if (options_.probes_only &&
        (absl::StartsWith(def.path, "/v1/") || absl::StartsWith(def.path, "/ui"))) {
      continue;
    }
    const std::string pattern =
        absl::StrReplaceAll(def.path, {{".", "\\."}, {"{id}", "([^/:]+)"}});
    routes_.push_back(
        Route{def.method, std::regex(pattern), def.handler, def.takes_body, def.query});
  }
}

RestGateway::~RestGateway() { Stop(); }

const std::vector<RestGateway::RouteDef>& RestGateway::Table() {
  static const auto* const table = new std::vector<RouteDef>{
      {"POST", "/v1/jobs", &RestGateway::SubmitJob, true},
      {"GET", "/v1/jobs", &RestGateway::ListJobs, false},
      {"GET", "/v1/jobs/{id}", &RestGateway::GetJob, false},
      {"POST", "/v1/jobs/{id}:cancel", &RestGateway::CancelJob, true},
      {"GET", "/v1/jobs/{id}/model", &RestGateway::GetModel, false, {"snapshot"}},
      {"GET", "/v1/jobs/{id}/logs", &RestGateway::GetLogs, false, {"after", "maxLines"}},
      {"GET", "/v1/workers", &RestGateway::ListWorkers, false},
      {"GET", "/ui", &RestGateway::GetUiPage, false},
      {"GET", "/ui/app.js", &RestGateway::GetUiScript, false},
      {"GET", "/ui/app.css", &RestGateway::GetUiStyle, false},
      {"GET", "/healthz", &RestGateway::Healthz, false},
      {"GET", "/readyz", &RestGateway::Readyz, false},
      {"GET", "/metrics", &RestGateway::Metrics, false},
  };
  return *table;
}

std::vector<RestRoute> RestGateway::Routes() {
  std::vector<RestRoute> routes;
  for (const RouteDef& def : Table()) routes.push_back({def.method, def.path});
  return routes;
}

const RestGateway::Route* RestGateway::Find(const HttpRequest& req, std::string& id) const {
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  std::smatch match;
  for (const Route& route : routes_) {
    if (route.method == method && std::regex_match(req.path, match, route.pattern)) {
      id = match.size() > 1 ? match[1].str() : "";
      return &route;
    }
  }
  return nullptr;
}

bool RestGateway::RefuseUnauthenticated(const HttpRequest& req, HttpResponse& res) {
  if (!options_.api_tokens.required() || !absl::StartsWith(req.path, "/v1/")) return false;
  const std::string header = req.Header("Authorization");
  const std::string token = BearerToken(header);
  if (!token.empty() && options_.api_tokens.Accepts(token)) return false;
  LogRefusal(options_.refusals, "tagi-coordinator", req.remote_addr,
             absl::StrCat(req.method, " ", req.path, ": ",
                          header.empty() ? "no Authorization header" : "invalid API token"));
  res.SetHeader("WWW-Authenticate", "Bearer realm=\"tagi\"");
  SendError(res, absl::UnauthenticatedError(header.empty()
                                                ? "this coordinator requires an API token: send "
                                                  "\"Authorization: Bearer <token>\""
                                                : "the API token is not valid"));
  return true;
}

void RestGateway::NoRoute(const HttpRequest& req, HttpResponse& res) const {
  std::set<std::string> allowed;
  for (const Route& route : routes_) {
    if (std::regex_match(req.path, route.pattern)) allowed.insert(route.method);
  }
  if (allowed.contains("GET")) allowed.insert("HEAD");
  if (!allowed.empty()) {
    const std::string allow = absl::StrJoin(allowed, ", ");
    res.SetHeader("Allow", allow);
    return SendError(res, 405,
                     absl::UnimplementedError(absl::StrFormat(
                         "%s is not served on %s; allowed: %s", req.method, req.path, allow)));
  }
  SendError(res, 404,
            absl::NotFoundError(
                absl::StrFormat("no such path: %s (see docs/openapi.yaml)", req.path)));
}

bool RestGateway::Screen(const HttpRequest& req, HttpResponse& res) {
  std::string id;
  const Route* route = Find(req, id);
  if (route == nullptr) {
    NoRoute(req, res);
    return true;
  }
  if (RefuseUnauthenticated(req, res) || RefuseQuery(req, res, route->query)) return true;
  if (route->takes_body) {
    if (RefuseContentType(req, res)) return true;
    if (req.has_body) return false;  // read it, then Serve
  }
  (this->*route->handler)(req, id, res);
  return true;
}

void RestGateway::Serve(const HttpRequest& req, HttpResponse& res) {
  std::string id;
  const Route* route = Find(req, id);
  if (route == nullptr) return NoRoute(req, res);  // Screen answered it already
  (this->*route->handler)(req, id, res);
}

absl::StatusOr<int> RestGateway::Bind(const std::string& address) { return server_.Bind(address); }

absl::Status RestGateway::Start() { return server_.Start(); }

void RestGateway::Stop() { server_.Stop(); }

void RestGateway::SubmitJob(const HttpRequest& req, const std::string&, HttpResponse& res) {
  auto spec = ParseSubmitBody(req.body);
  if (!spec.ok()) return SendError(res, spec.status());
  auto job = c_.Submit(*spec);
  if (!job.ok()) return SendError(res, job.status());
  res.SetHeader("Location", "/v1/jobs/" + job->id());
  SendMessage(res, *job, 201);
}

void RestGateway::ListJobs(const HttpRequest&, const std::string&, HttpResponse& res) {
  tagi::v1::ListJobsResponse reply;
  for (auto& job : c_.List()) *reply.add_jobs() = std::move(job);
  SendMessage(res, reply);
}

void RestGateway::GetJob(const HttpRequest&, const std::string& id, HttpResponse& res) {
  Reply(res, c_.Get(id));
}

void RestGateway::CancelJob(const HttpRequest& req, const std::string& id, HttpResponse& res) {
  // The id is in the path; a body, if any, must be the empty object.
  google::protobuf::Empty empty;
  if (!absl::StripAsciiWhitespace(req.body).empty()) {
    absl::Status st = CheckJsonDepth(req.body);
    if (st.ok()) {
      const auto parsed = google::protobuf::util::JsonStringToMessage(req.body, &empty, StrictParse());
      if (!parsed.ok()) st = absl::InvalidArgumentError(parsed.message().as_string());
    }
    if (!st.ok()) {
      return SendError(res, absl::InvalidArgumentError(
                                absl::StrCat("cancel takes no body or {}; ", st.message())));
    }
  }
  Reply(res, c_.Cancel(id));
}

void RestGateway::GetModel(const HttpRequest& req, const std::string& id, HttpResponse& res) {
  bool snapshot = false;
  for (const auto& [key, value] : req.query) {
    if (key != "snapshot") continue;
    if (value != "true" && value != "false") {
      return SendError(res, absl::InvalidArgumentError(absl::StrFormat(
                                "query parameter snapshot=\"%s\": expected true or false", value)));
    }
    snapshot = value == "true";
  }
  auto bytes = snapshot ? c_.SnapshotModelFile(id) : c_.ModelFile(id);
  if (!bytes.ok()) return SendError(res, bytes.status());
  res.SetHeader("Content-Disposition",
                absl::StrCat("attachment; filename=\"", DownloadName(id), "\""));
  res.SetSharedContent(std::make_shared<const std::string>(std::move(*bytes)),
                       "application/octet-stream");
}

void RestGateway::GetLogs(const HttpRequest& req, const std::string& id, HttpResponse& res) {
  auto after = QueryNumber(req, "after", 0, std::numeric_limits<uint64_t>::max());
  if (!after.ok()) return SendError(res, after.status());
  auto most = QueryNumber(req, "maxLines", 0, std::numeric_limits<uint32_t>::max());
  if (!most.ok()) return SendError(res, most.status());
  Reply(res, c_.Logs(id, *after, static_cast<size_t>(*most)));
}

namespace {

// A file of the web UI: no data, the same for everyone, no token needed
// (what it shows comes from /v1/, which has the API's authentication).
void SendUiFile(HttpResponse& res, std::string_view body, const char* type) {
  res.SetHeader("Content-Security-Policy", kWebUiPolicy);
  res.SetHeader("X-Content-Type-Options", "nosniff");
  res.SetHeader("Referrer-Policy", "no-referrer");
  res.SetHeader("Cache-Control", "no-cache");
  res.SetContent(std::string(body), type);
}

}  // namespace

void RestGateway::GetUiPage(const HttpRequest&, const std::string&, HttpResponse& res) {
  SendUiFile(res, WebUiPage(), "text/html; charset=utf-8");
}

void RestGateway::GetUiScript(const HttpRequest&, const std::string&, HttpResponse& res) {
  SendUiFile(res, WebUiScript(), "text/javascript; charset=utf-8");
}

void RestGateway::GetUiStyle(const HttpRequest&, const std::string&, HttpResponse& res) {
  SendUiFile(res, WebUiStyle(), "text/css; charset=utf-8");
}

void RestGateway::ListWorkers(const HttpRequest&, const std::string&, HttpResponse& res) {
  tagi::v1::ListWorkersResponse reply;
  for (auto& w : c_.ListWorkers()) *reply.add_workers() = std::move(w);
  SendMessage(res, reply);
}

void RestGateway::Healthz(const HttpRequest&, const std::string&, HttpResponse& res) {
  res.SetContent("ok\n", kTextType);
}

void RestGateway::Readyz(const HttpRequest&, const std::string&, HttpResponse& res) {
  const absl::Status st = ready_();
  if (!st.ok()) return SendError(res, 503, st);
  res.SetContent("ok\n", kTextType);
}

void RestGateway::Metrics(const HttpRequest&, const std::string&, HttpResponse& res) {
  res.SetContent(metrics_(), kMetricsType);
}

}  // namespace tagi::coordinator
