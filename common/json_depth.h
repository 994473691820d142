// CheckJsonDepth: refuses JSON text that nests deeper than a limit, before
// any parser sees it.
//
// protobuf's JSON parser (3.21) takes time and memory that grow faster than
// linearly with the nesting of arrays (a 64 KB body of "[[[[..." costs
// minutes of CPU), so every parser of untrusted JSON calls this first. The
// scan is one pass with no allocation: brackets inside strings (escapes
// included) do not count; anything else about the text is left to the
// parser, except an empty object key ("": ...), which is refused too:
// protobuf 3.21 takes {"": {}} inside a message without complaint and the
// message it makes prints as JSON that parses to another one.
#ifndef TAGI_COMMON_JSON_DEPTH_H_
#define TAGI_COMMON_JSON_DEPTH_H_

#include <string_view>

#include "absl/status/status.h"

namespace tagi {

// Deep enough for any JobSpec the validator accepts: residual blocks nest
// 16 deep (spec::kMaxNesting) at about 4 JSON levels each.
inline constexpr int kMaxJsonDepth = 128;

// InvalidArgument naming the limit and the byte offset where the text goes
// deeper than `max_depth` objects and arrays, or where an empty key is; OK
// otherwise.
absl::Status CheckJsonDepth(std::string_view json, int max_depth = kMaxJsonDepth);

}  // namespace tagi

#endif  // TAGI_COMMON_JSON_DEPTH_H_
