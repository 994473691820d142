// Shared secrets: token files and their comparison.
//
// Tokens are read from files (never from flags' values, which `ps` shows).
// A token file holds one token per line; blank lines and lines starting
// with '#' are ignored, surrounding whitespace is trimmed, and a token may
// not contain whitespace. Comparisons take time independent of where two
// tokens differ (they still reveal the length of the expected token).
// Thread-safe: TokenSet is immutable after construction.
#ifndef TAGI_COMMON_AUTH_H_
#define TAGI_COMMON_AUTH_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tagi {

// Metadata (gRPC) and header (REST) names that carry tokens.
inline constexpr char kJoinTokenMetadataKey[] = "tagi-join-token";
inline constexpr char kAuthorizationMetadataKey[] = "authorization";

// True when a == b; the running time depends on the lengths only, never on
// the position of the first difference.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// The tokens of a token file's contents, in order. InvalidArgument naming
// the line when a line holds more than one word; NotFound when there is no
// token at all. `what` names the file in messages ("--api-tokens-file F").
absl::StatusOr<std::vector<std::string>> ParseTokenFile(std::string_view contents,
                                                        const std::string& what);

// Reads and parses a token file: NotFound / PermissionDenied / ... with the
// path and the OS's reason when it cannot be read, the parser's errors
// otherwise. Files over 1 MiB are refused.
absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path,
                                                       const std::string& flag);

// "Bearer <token>" -> "<token>" (scheme case-insensitive); empty when the
// value is not a bearer credential.
std::string BearerToken(std::string_view header_value);

// A set of accepted tokens. Empty: nothing is required (Accepts is true).
class TokenSet {
 public:
  TokenSet() = default;
  explicit TokenSet(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}

  bool required() const { return !tokens_.empty(); }
  // Compares `token` with every accepted token in constant time each (no
  // early exit), so timing does not tell which one nearly matched.
  bool Accepts(std::string_view token) const;

 private:
  std::vector<std::string> tokens_;
};

}  // namespace tagi

#endif  // TAGI_COMMON_AUTH_H_
