#include "common/json_depth.h"

#include "absl/strings/str_format.h"

namespace tagi {

absl::Status CheckJsonDepth(std::string_view json, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  size_t string_start = 0;
  bool after_empty_string = false;  // the last token was "" and only blanks followed
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
        after_empty_string = i == string_start + 1;
      }
      continue;
    }
    if (after_empty_string) {
      if (c == ':') {
        return absl::InvalidArgumentError(absl::StrFormat(
            "the JSON has an object key that is empty (at byte %d); every key must name a "
            "field",
            i));
      }
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') after_empty_string = false;
    }
    switch (c) {
      case '"':
        in_string = true;
        string_start = i;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "the JSON nests objects and arrays more than %d deep (at byte %d); that is the "
              "limit",
              max_depth, i));
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;  // unbalanced text is the parser's to report
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace tagi
