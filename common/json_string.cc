#include "common/json_string.h"

#include "absl/strings/str_format.h"

namespace tagi {
namespace {

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

}  // namespace

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

}  // namespace tagi
