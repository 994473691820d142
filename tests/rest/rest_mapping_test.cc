// The gateway's pure parts: the one status -> HTTP mapping and the error
// body, whose escaping must give valid JSON for any message.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "coordinator/rest_gateway.h"
#include "gtest/gtest.h"

namespace tagi::coordinator {
namespace {

TEST(HttpStatusFromCode, MapsEveryCanonicalCode) {
  using C = absl::StatusCode;
  const std::pair<C, int> expected[] = {
      {C::kOk, 200},
      {C::kCancelled, 499},
      {C::kUnknown, 500},
      {C::kInvalidArgument, 400},
      {C::kDeadlineExceeded, 504},
      {C::kNotFound, 404},
      {C::kAlreadyExists, 409},
      {C::kPermissionDenied, 403},
      {C::kResourceExhausted, 429},
      {C::kFailedPrecondition, 409},
      {C::kAborted, 409},
      {C::kOutOfRange, 400},
      {C::kUnimplemented, 501},
      {C::kInternal, 500},
      {C::kUnavailable, 503},
      {C::kDataLoss, 500},
      {C::kUnauthenticated, 401},
  };
  for (const auto& [code, http] : expected) {
    EXPECT_EQ(HttpStatusFromCode(code), http) << absl::StatusCodeToString(code);
  }
}

// The message survives a round trip through a JSON parser.
std::string ParsedMessage(const std::string& json) {
  google::protobuf::Struct s;
  const auto st = google::protobuf::util::JsonStringToMessage(json, &s);
  EXPECT_TRUE(st.ok()) << st << "\n" << json;
  return s.fields().contains("message") ? s.fields().at("message").string_value() : "";
}

TEST(ErrorJson, NamesTheCodeAndEscapesTheMessage) {
  EXPECT_EQ(ErrorJson(absl::NotFoundError("no job with id \"job-9\"")),
            "{\"code\": \"NOT_FOUND\", \"message\": \"no job with id \\\"job-9\\\"\"}\n");
  const std::string tricky =
      "back\\slash, tab\t, newline\n, nul" + std::string(1, '\0') + ", quote\", ünïcödé, 中文";
  EXPECT_EQ(ParsedMessage(ErrorJson(absl::InvalidArgumentError(tricky))), tricky);
}

TEST(ErrorJson, ReplacesBytesThatAreNotUtf8) {
  const std::string bad = std::string("a\xff") + "b\xc3" + "(c\xe2\x82";  // stray and cut
  EXPECT_EQ(ParsedMessage(ErrorJson(absl::InvalidArgumentError(bad))),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD(c\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(RestGatewayRoutes, AreGetAndPostOnlyAndUnique) {
  std::set<std::pair<std::string, std::string>> seen;
  for (const RestRoute& r : RestGateway::Routes()) {
    EXPECT_TRUE(r.method == "GET" || r.method == "POST") << r.method << " " << r.path;
    EXPECT_TRUE(seen.insert({r.method, r.path}).second) << "twice: " << r.method << " " << r.path;
  }
  EXPECT_EQ(seen.size(), 13u);
}

}  // namespace
}  // namespace tagi::coordinator
