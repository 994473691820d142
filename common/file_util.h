// Whole-file reads and crash-safe writes.
//
// WriteFileAtomic writes to a temporary file in the same directory, fsyncs
// it, renames it over the target and fsyncs the directory: after a crash the
// target holds either the old or the new contents, never a mix.
// Thread-safe (no shared state); concurrent writers of one path race.
//
// FileSystem is the seam through which the coordinator's state dir is
// written and pruned, so that tests can inject disk faults (a full disk, a
// read-only mount, an I/O error) by wrapping RealFileSystem.
#ifndef TAGI_COMMON_FILE_UTIL_H_
#define TAGI_COMMON_FILE_UTIL_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace tagi {

// Reads a whole file. A file larger than max_size is refused
// (FailedPrecondition) before anything is allocated for it.
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_size);

// `mode`: the file's permissions (0600 for a secret; the default is what
// any file written with the usual umask gets).
absl::Status WriteFileAtomic(const std::string& path, const std::string& data,
                             unsigned mode = 0644);

// OK when files can be created under `dir` (or, when it does not exist yet,
// under its nearest existing ancestor): a writable directory on a file
// system that is neither mounted read-only nor out of space or inodes.
// Unavailable naming the problem and the path otherwise. Cheap (stat,
// statvfs, access): nothing is written.
absl::Status CheckDirWritable(const std::string& dir);

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // As tagi::WriteFileAtomic; creates the parent directories first.
  virtual absl::Status WriteFileAtomic(const std::string& path, const std::string& data) = 0;
  // Removes a file or a directory tree; OK when nothing is there.
  virtual absl::Status RemoveAll(const std::string& path) = 0;
};

// The host's file system. Stateless.
class RealFileSystem : public FileSystem {
 public:
  absl::Status WriteFileAtomic(const std::string& path, const std::string& data) override;
  absl::Status RemoveAll(const std::string& path) override;
};

}  // namespace tagi

#endif  // TAGI_COMMON_FILE_UTIL_H_
