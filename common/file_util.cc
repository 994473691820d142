#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tagi {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  const int err = errno;
  const std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

// Closes the descriptor on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

absl::Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_size) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the regular-file
  // check below refuses it.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return ErrnoError("cannot open", path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size > max_size) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is %d bytes, more than the limit of %d", path, size, max_size));
  }
  std::string out(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd.get(), out.data() + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", path);
    }
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& data, unsigned mode) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir =
      target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  Fd fd(::mkstemp(tmp.data()));
  if (fd.get() < 0) return ErrnoError("cannot create a temporary file for", path);
  // mkstemp creates 0600; model and state files are readable like any
  // file written with the default umask (reading the umask would change it).
  absl::Status st = ::fchmod(fd.get(), static_cast<mode_t>(mode)) == 0
                        ? absl::OkStatus()
                        : ErrnoError("cannot chmod", tmp);
  if (st.ok()) st = WriteAll(fd.get(), data, tmp);
  if (st.ok() && ::fsync(fd.get()) != 0) st = ErrnoError("cannot fsync", tmp);
  if (st.ok() && ::close(fd.Release()) != 0) st = ErrnoError("cannot close", tmp);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = ErrnoError("cannot rename into place", path);
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() >= 0) ::fsync(dfd.get());
  return absl::OkStatus();
}

absl::Status CheckDirWritable(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path path = fs::absolute(dir, ec);
  if (ec) path = dir;
  while (!fs::exists(path, ec) && path.has_parent_path() && path != path.parent_path()) {
    path = path.parent_path();
  }
  const std::string where = path == fs::path(dir) ? dir : absl::StrCat(dir, " (", path.string(), ")");
  if (!fs::is_directory(path, ec)) {
    return absl::UnavailableError(absl::StrCat(where, " is not a directory"));
  }
  struct statvfs vfs;
  if (::statvfs(path.c_str(), &vfs) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot stat the file system of ", where, ": ", std::strerror(errno)));
  }
  if ((vfs.f_flag & ST_RDONLY) != 0) {
    return absl::UnavailableError(absl::StrCat(where, " is on a read-only file system"));
  }
  if (vfs.f_bavail == 0) {
    return absl::UnavailableError(absl::StrCat(where, " is on a full file system (no space left)"));
  }
  if (vfs.f_files > 0 && vfs.f_favail == 0) {
    return absl::UnavailableError(
        absl::StrCat(where, " is on a file system with no free inodes"));
  }
  if (::access(path.c_str(), W_OK | X_OK) != 0) {
    return absl::UnavailableError(
        absl::StrCat(where, " is not writable: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status RealFileSystem::WriteFileAtomic(const std::string& path, const std::string& data) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);
    if (ec) {
      const absl::Status st = absl::InternalError(absl::StrCat(
          "cannot create ", target.parent_path().string(), ": ", ec.message()));
      if (ec == std::errc::no_space_on_device) return absl::ResourceExhaustedError(st.message());
      return st;
    }
  }
  return tagi::WriteFileAtomic(path, data);
}

absl::Status RealFileSystem::RemoveAll(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace tagi
