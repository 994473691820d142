// Job-file overrides from the command line: `--set FIELD=VALUE`, as
// tagi-run and `tagictl submit` take them, so that trying another world
// size, a subset of the data or more epochs needs no edited copy of a job
// file.
//
// FIELD is a path of the job file's field names (camelCase, as in the
// file; snake_case is accepted too) joined by dots: `epochs`, `batchSize`,
// `data.trainLimit`, `noise.sigmaV`. A number indexes a repeated field:
// `layers.2.linear.outFeatures`. VALUE is read as the field's type: an
// integer (in range), a real, true/false, a string, or an enum's name.
// Only single values can be set: a message, a whole repeated field, and a
// field of a oneof member other than the one the file chose (making a
// layer another kind) are refused.
//
// Errors are InvalidArgument and name the FIELD=VALUE, the field and what
// was expected (with the nearest field name for a misspelt one). Applying
// a list is all or nothing: on an error the spec is left as it was.
// The result is a spec like any other: the caller validates it
// (ValidateJobSpec) as it would a file's.
#ifndef TAGI_COMMON_JOB_OVERRIDES_H_
#define TAGI_COMMON_JOB_OVERRIDES_H_

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "tagi/v1/job.pb.h"

namespace tagi {

// The longest FIELD=VALUE accepted, and the most overrides in one list.
inline constexpr size_t kMaxOverrideBytes = 4096;
inline constexpr size_t kMaxOverrides = 256;

absl::Status ApplyOverride(tagi::v1::JobSpec& spec, absl::string_view assignment);
absl::Status ApplyOverrides(tagi::v1::JobSpec& spec, const std::vector<std::string>& assignments);

}  // namespace tagi

#endif  // TAGI_COMMON_JOB_OVERRIDES_H_
