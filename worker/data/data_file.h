// Data files: opening a job's data under the worker's data roots without a
// window between the check and the open, and reading them with a bound.
//
// CheckUnderRoots (data_roots.h) answers whether a path lies under a root,
// but a link swapped in after that answer would still be followed by a
// plain open(). OpenUnderRoots therefore opens the root itself and then the
// path relative to it with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS),
// so the kernel refuses any resolution that leaves the root (relative
// symlinks that stay inside the root are followed; absolute ones are
// refused, as they resolve from /). On a kernel without
// openat2 it walks the path one component at a time with O_PATH |
// O_NOFOLLOW, refusing every symlink. With no roots (tagi-train, tests)
// paths open as given.
//
// Errors name the field and the path, never the file's contents:
// PermissionDenied outside the roots, NotFound when missing,
// InvalidArgument when not a regular file (or directory) or over the size
// cap. Thread-compatible; the returned objects own their descriptors.
#ifndef TAGI_WORKER_DATA_DATA_FILE_H_
#define TAGI_WORKER_DATA_DATA_FILE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tagi::data {

// An owned file descriptor (-1: none).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Where a job's data may come from: `roots` empty means anywhere.
struct DataAccess {
  std::vector<std::string> roots;
  // Tests: take the O_PATH walk even where the kernel has openat2.
  bool walk_without_openat2 = false;
};

// Opens `path` read-only (a directory when `directory`), beneath one of the
// roots of `access` as described above. `field` names the job field in
// errors.
absl::StatusOr<UniqueFd> OpenUnderRoots(const std::string& field, const std::string& path,
                                        const DataAccess& access, bool directory);

// A whole regular file, mapped read-only (an empty file maps to no bytes).
// Pages are shared with the page cache, so a large data set is not copied
// to be read. Move-only.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

  // Maps the regular file `fd` (which it keeps open while mapped).
  // InvalidArgument naming `path` when it is not a regular file or is
  // larger than `max_bytes`.
  static absl::StatusOr<MappedFile> Map(UniqueFd fd, const std::string& path, uint64_t max_bytes);

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  UniqueFd fd_;
};

// OpenUnderRoots + Map.
absl::StatusOr<MappedFile> MapDataFile(const std::string& field, const std::string& path,
                                       const DataAccess& access, uint64_t max_bytes);

// A data file opened beneath the roots (OpenUnderRoots) and held open, for
// the readers that open files by name (IDX, CIFAR-10, CSV regression): they
// are given name(), /proc/self/fd/N, which the kernel resolves to the file
// already opened, not to whatever the original path names by then, so a
// link swapped in after the roots were checked is never followed. With no
// roots the name is the path itself. Move-only.
class PinnedFile {
 public:
  static absl::StatusOr<PinnedFile> Open(const std::string& field, const std::string& path,
                                         const DataAccess& access);
  const std::string& name() const { return name_; }
  // `st` with name() replaced by the original path in its message, so
  // errors still name the user's file.
  absl::Status Restore(const absl::Status& st) const;

 private:
  UniqueFd fd_;
  std::string path_;
  std::string name_;
};

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_DATA_FILE_H_
