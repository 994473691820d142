#include "common/auth.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"

namespace tagi {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of the longer string is visited, whatever the contents; the
  // length difference folds into the same accumulator.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  // volatile: keep the compiler from turning the loop into an early exit.
  volatile unsigned char result = diff;
  return result == 0;
}

absl::StatusOr<std::vector<std::string>> ParseTokenFile(std::string_view contents,
                                                        const std::string& what) {
  std::vector<std::string> tokens;
  size_t line_no = 0;
  size_t start = 0;
  while (start <= contents.size()) {
    size_t end = contents.find('\n', start);
    if (end == std::string_view::npos) end = contents.size();
    ++line_no;
    const std::string line(
        absl::StripAsciiWhitespace(std::string(contents.substr(start, end - start))));
    start = end + 1;
    if (line.empty() || line[0] == '#') continue;
    for (char ch : line) {
      if (absl::ascii_isspace(static_cast<unsigned char>(ch))) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: line %d holds more than one word; expected one token per line", what, line_no));
      }
    }
    tokens.push_back(line);
  }
  if (tokens.empty()) {
    return absl::NotFoundError(absl::StrFormat(
        "%s holds no token (only blank lines and # comments); expected one token per line",
        what));
  }
  return tokens;
}

absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path,
                                                       const std::string& flag) {
  const std::string what = absl::StrFormat("%s %s", flag, path);
  auto contents = ReadFile(path, size_t{1} << 20);
  if (!contents.ok()) {
    return absl::Status(contents.status().code(),
                        absl::StrFormat("%s: cannot read it: %s", what,
                                        std::string(contents.status().message())));
  }
  return ParseTokenFile(*contents, what);
}

std::string BearerToken(std::string_view header_value) {
  constexpr std::string_view kScheme = "bearer ";
  if (header_value.size() <= kScheme.size()) return "";
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(header_value[i])) != kScheme[i]) return "";
  }
  return std::string(
      absl::StripAsciiWhitespace(std::string(header_value.substr(kScheme.size()))));
}

bool TokenSet::Accepts(std::string_view token) const {
  if (tokens_.empty()) return true;
  bool ok = false;
  for (const std::string& t : tokens_) ok |= ConstantTimeEquals(t, token);
  return ok;
}

}  // namespace tagi
