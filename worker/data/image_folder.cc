#include "worker/data/image_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/status.h"
#include "worker/data/image.h"

namespace tagi::data {
namespace {

struct Entry {
  std::string name;
  bool directory = false;
};

// The entries of the open directory `fd` (not "." and "..", not hidden),
// sorted by name; at most `cap` of them.
absl::StatusOr<std::vector<Entry>> List(int fd, const std::string& where, size_t cap) {
  const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return absl::InternalError(absl::StrCat(where, ": ", std::strerror(errno)));
  DIR* d = fdopendir(copy);
  if (d == nullptr) {
    ::close(copy);
    return absl::InvalidArgumentError(absl::StrCat(where, ": cannot list: ", std::strerror(errno)));
  }
  struct CloseDir {
    DIR* d;
    ~CloseDir() { closedir(d); }
  } close_dir{d};
  std::vector<Entry> out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    struct stat st {};
    if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "/", e->d_name, " is a symlink; image folders are read without following links"));
    }
    if (out.size() == cap) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": more than ", cap, " entries"));
    }
    out.push_back({e->d_name, S_ISDIR(st.st_mode)});
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

bool IsImageName(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return absl::EndsWith(lower, ".png") || absl::EndsWith(lower, ".jpg") ||
         absl::EndsWith(lower, ".jpeg");
}

absl::StatusOr<std::vector<uint8_t>> ReadImageFile(int dir, const std::string& name,
                                                   const std::string& path) {
  UniqueFd fd(openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxImageFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.st_size,
                                                   " bytes; image files of at most ",
                                                   kMaxImageFileBytes, " are read"));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": read failed or the file shrank"));
    }
    done += static_cast<size_t>(got);
  }
  return bytes;
}

// Appends the images of one class folder.
absl::Status ReadClass(int root, const std::string& dir, const std::string& cls, int32_t label,
                       const ImageShape& shape, tagi::v1::DataSpec::ImageFit fit, Dataset& out) {
  const std::string where = absl::StrCat(dir, "/", cls);
  UniqueFd fd(openat(root, cls.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": cannot open: ", std::strerror(errno)));
  }
  TAGI_ASSIGN_OR_RETURN(const std::vector<Entry> files, List(fd.get(), where, kMaxImagesPerSet));
  size_t images = 0;
  for (const Entry& f : files) {
    if (f.directory || !IsImageName(f.name)) continue;
    ++images;
    if (out.num_samples == kMaxImagesPerSet) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, ": more than ", kMaxImagesPerSet, " images"));
    }
    const std::string path = absl::StrCat(where, "/", f.name);
    TAGI_ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, ReadImageFile(fd.get(), f.name, path));
    TAGI_ASSIGN_OR_RETURN(const Image image, DecodeImage(bytes, path));
    const std::vector<float> x = FitImage(image, shape.channels, shape.height, shape.width, fit);
    out.inputs.insert(out.inputs.end(), x.begin(), x.end());
    out.labels.push_back(label);
    ++out.num_samples;
  }
  if (images == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": empty class folder (no .png, .jpg or .jpeg files)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Dataset> LoadImageFolder(const std::string& field, const std::string& dir,
                                        const DataAccess& access, const ImageShape& shape,
                                        tagi::v1::DataSpec::ImageFit fit,
                                        const std::vector<std::string>& classes) {
  TAGI_ASSIGN_OR_RETURN(const UniqueFd root, OpenUnderRoots(field, dir, access, true));
  TAGI_ASSIGN_OR_RETURN(const std::vector<Entry> entries,
                        List(root.get(), dir, kMaxImageClasses * 4));
  std::vector<std::string> found;
  for (const Entry& e : entries) {
    if (!e.directory) continue;
    if (auto st = CheckJobText("class folder name", e.name, 255); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": a ", st.message()));
    }
    found.push_back(e.name);
  }
  if (found.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", dir, " has no class folders (one sub-folder per class)"));
  }
  if (found.size() > kMaxImageClasses) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": ", found.size(), " class folders; at most ", kMaxImageClasses));
  }
  const std::vector<std::string>& names = classes.empty() ? found : classes;
  if (names.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": one class folder; classification needs at least 2"));
  }
  Dataset out;
  out.channels = shape.channels;
  out.height = shape.height;
  out.width = shape.width;
  out.input_dim = size_t{shape.channels} * shape.height * shape.width;
  out.num_classes = static_cast<int>(names.size());
  out.class_names = names;
  for (const std::string& cls : found) {
    const auto it = std::find(names.begin(), names.end(), cls);
    if (it == names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, "/", cls, ": a class the training folder does not have"));
    }
    TAGI_RETURN_IF_ERROR(
        ReadClass(root.get(), dir, cls, static_cast<int32_t>(it - names.begin()), shape, fit, out));
  }
  return out;
}

}  // namespace tagi::data
