// Whole-file reads and crash-safe writes.
//
// WriteFileAtomic writes to a temporary file in the same directory, fsyncs
// it, renames it over the target and fsyncs the directory: after a crash the
// target holds either the old or the new contents, never a mix.
// Thread-safe (no shared state); concurrent writers of one path race.
#ifndef TAGI_COMMON_FILE_UTIL_H_
#define TAGI_COMMON_FILE_UTIL_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace tagi {

// Reads a whole file. A file larger than max_size is refused
// (FailedPrecondition) before anything is allocated for it.
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_size);

absl::Status WriteFileAtomic(const std::string& path, const std::string& data);

}  // namespace tagi

#endif  // TAGI_COMMON_FILE_UTIL_H_
