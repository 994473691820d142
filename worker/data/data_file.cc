#include "worker/data/data_file.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace tagi::data {
namespace {

namespace fs = std::filesystem;

// `path` relative to `root` when it lies lexically beneath it (both
// absolute and normal); nullopt otherwise.
std::optional<fs::path> Beneath(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r) {
    if (r->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *r) return std::nullopt;
    ++p;
  }
  fs::path rest;
  for (; p != path.end(); ++p) {
    if (!p->empty()) rest /= *p;
  }
  if (rest.empty()) rest = ".";
  return rest;
}

absl::Status OpenError(const std::string& field, const std::string& path, int err) {
  if (err == ENOENT || err == ENOTDIR) {
    return absl::NotFoundError(absl::StrCat(field, ": ", path, " does not exist"));
  }
  if (err == EXDEV || err == ELOOP) {
    return absl::PermissionDeniedError(
        absl::StrCat(field, ": ", path,
                     " leads outside the data root it is under (through a symlink or "
                     "'..'); data is read only beneath the worker's --data-root directories"));
  }
  return absl::PermissionDeniedError(
      absl::StrCat(field, ": cannot open ", path, ": ", std::strerror(err)));
}

// openat2 beneath `dir`; -1 with errno set on failure (ENOSYS: no openat2).
int OpenBeneath(int dir, const fs::path& rel, int flags) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, dir, rel.c_str(), &how, sizeof(how)));
}

// The fallback: one component at a time, no symlinks at all, no "..".
int WalkBeneath(int dir, const fs::path& rel, int flags) {
  UniqueFd current(fcntl(dir, F_DUPFD_CLOEXEC, 0));
  if (current.get() < 0) return -1;
  std::vector<fs::path> parts;
  for (const fs::path& part : rel) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      errno = EXDEV;
      return -1;
    }
    parts.push_back(part);
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    UniqueFd next(
        openat(current.get(), parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (next.get() < 0) {
      // A symlinked directory reads as ENOTDIR here: say it is a link.
      struct stat st {};
      const int err = errno;
      const bool link = fstatat(current.get(), parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                        S_ISLNK(st.st_mode);
      errno = link ? ELOOP : err;
      return -1;
    }
    current = std::move(next);
  }
  const char* last = parts.empty() ? "." : parts.back().c_str();
  return openat(current.get(), last, flags | O_NOFOLLOW);
}

int OpenRelative(int dir, const fs::path& rel, int flags, bool walk) {
  if (walk) return WalkBeneath(dir, rel, flags);
  const int fd = OpenBeneath(dir, rel, flags);
  if (fd >= 0 || errno != ENOSYS) return fd;
  return WalkBeneath(dir, rel, flags);
}

// The forms of `p` to try against the roots: as written (made absolute and
// normal), then with its existing part's links resolved.
std::vector<fs::path> Forms(const std::string& p) {
  std::vector<fs::path> out;
  std::error_code ec;
  const fs::path absolute = fs::absolute(p, ec);
  if (ec) return out;
  out.push_back(absolute.lexically_normal());
  const fs::path resolved = fs::weakly_canonical(absolute, ec);
  if (!ec && resolved.lexically_normal() != out[0]) out.push_back(resolved.lexically_normal());
  return out;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<UniqueFd> OpenUnderRoots(const std::string& field, const std::string& path,
                                        const DataAccess& access, bool directory) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": no path given"));
  const int flags = O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0);
  if (access.roots.empty()) {
    UniqueFd fd(::open(path.c_str(), flags));
    if (fd.get() < 0) return OpenError(field, path, errno);
    return fd;
  }
  for (const fs::path& form : Forms(path)) {
    for (const std::string& root : access.roots) {
      for (const fs::path& root_form : Forms(root)) {
        const std::optional<fs::path> rel = Beneath(form, root_form);
        if (!rel) continue;
        UniqueFd dir(::open(root_form.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (dir.get() < 0) continue;
        UniqueFd fd(OpenRelative(dir.get(), *rel, flags, access.walk_without_openat2));
        if (fd.get() < 0) return OpenError(field, path, errno);
        return fd;
      }
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat(field, ": ", path, " is outside the directories this worker reads data from (",
                   absl::StrJoin(access.roots, ", "),
                   "); its operator can allow more with tagi-worker --data-root DIR,DIR,..."));
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::move(other.fd_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::move(other.fd_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

absl::StatusOr<MappedFile> MappedFile::Map(UniqueFd fd, const std::string& path,
                                           uint64_t max_bytes) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": file is ", size, " bytes; at most ", max_bytes, " are read"));
  }
  MappedFile out;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot map ", path, ": ", std::strerror(errno)));
    }
    out.data_ = static_cast<const uint8_t*>(p);
    out.size_ = size;
  }
  out.fd_ = std::move(fd);
  return out;
}

absl::StatusOr<MappedFile> MapDataFile(const std::string& field, const std::string& path,
                                       const DataAccess& access, uint64_t max_bytes) {
  TAGI_ASSIGN_OR_RETURN(UniqueFd fd, OpenUnderRoots(field, path, access, false));
  return MappedFile::Map(std::move(fd), path, max_bytes);
}

absl::StatusOr<PinnedFile> PinnedFile::Open(const std::string& field, const std::string& path,
                                            const DataAccess& access) {
  PinnedFile out;
  out.path_ = path;
  out.name_ = path;
  if (access.roots.empty()) return out;
  TAGI_ASSIGN_OR_RETURN(out.fd_, OpenUnderRoots(field, path, access, false));
  out.name_ = absl::StrCat("/proc/self/fd/", out.fd_.get());
  return out;
}

absl::Status PinnedFile::Restore(const absl::Status& st) const {
  if (st.ok() || name_ == path_) return st;
  return absl::Status(st.code(), absl::StrReplaceAll(st.message(), {{name_, path_}}));
}

}  // namespace tagi::data
