// A JSON string literal (RFC 8259) of any bytes: quotes, backslashes and
// control bytes escaped, valid UTF-8 kept, every other byte as U+FFFD, so
// that text from a client or a file always makes valid JSON.
#ifndef TAGI_COMMON_JSON_STRING_H_
#define TAGI_COMMON_JSON_STRING_H_

#include <string>

#include "absl/strings/string_view.h"

namespace tagi {

// Appends `s` to `out` as a quoted JSON string.
void AppendJsonString(absl::string_view s, std::string& out);

}  // namespace tagi

#endif  // TAGI_COMMON_JSON_STRING_H_
