#include "worker/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace tagi::data {
namespace {

constexpr uint8_t kTypeUnsignedByte = 0x08;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Distinguishes "missing" from "unreadable" before zlib sees the path, and
// returns the first two bytes (to tell gzip from raw IDX).
absl::StatusOr<std::array<uint8_t, 2>> PeekMagic(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("IDX file ", path, " does not exist"));
  }
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("IDX file ", path, " is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot open IDX file ", path, ": ", std::strerror(errno)));
  }
  std::array<uint8_t, 2> magic{};
  in.read(reinterpret_cast<char*>(magic.data()), 2);
  if (in.gcount() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": file is ", in.gcount(),
                     " bytes, too short for an IDX header"));
  }
  return magic;
}

// Reads up to `n` bytes; returns how many were read, or an error for a
// corrupt gzip stream. zlib reads at most UINT_MAX bytes per call.
absl::StatusOr<uint64_t> ReadSome(gzFile f, const std::string& path,
                                  uint8_t* dst, uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    const unsigned chunk =
        static_cast<unsigned>(std::min<uint64_t>(n - done, 1u << 30));
    const int got = gzread(f, dst + done, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": corrupt or truncated gzip data: ", msg ? msg : "unknown"));
    }
    if (got == 0) break;
    done += static_cast<uint64_t>(got);
  }
  return done;
}

// Reads exactly `n` bytes of the IDX stream, else an error naming `what`.
absl::Status ReadExact(gzFile f, const std::string& path, uint8_t* dst,
                       uint64_t n, const char* what) {
  TAGI_ASSIGN_OR_RETURN(const uint64_t got, ReadSome(f, path, dst, n));
  if (got != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: truncated IDX file: expected %d bytes of %s, "
                        "found %d",
                        path, n, what, got));
  }
  return absl::OkStatus();
}

// Parses the magic and dimensions; returns the payload size in bytes.
absl::StatusOr<uint64_t> ReadHeader(gzFile f, const std::string& path,
                                    std::vector<uint32_t>& dims) {
  std::array<uint8_t, 4> magic{};
  TAGI_RETURN_IF_ERROR(ReadExact(f, path, magic.data(), 4, "magic"));
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad IDX magic (the decompressed data does not start with 00 00 <type> <ndims>)",
        path));
  }
  if (magic[2] != kTypeUnsignedByte) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: unsupported IDX element type 0x%02x (only 0x08, unsigned byte, "
        "is supported)",
        path, magic[2]));
  }
  const int ndims = magic[3];
  if (ndims == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": IDX header declares 0 dimensions"));
  }
  std::vector<uint8_t> raw(4 * static_cast<size_t>(ndims));
  TAGI_RETURN_IF_ERROR(
      ReadExact(f, path, raw.data(), raw.size(), "dimensions"));
  dims.assign(ndims, 0);
  uint64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    const uint8_t* p = &raw[4 * i];
    dims[i] = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
              (uint32_t{p[2]} << 8) | uint32_t{p[3]};
    // Checked before multiplying, so the product can neither overflow nor
    // trigger a huge allocation.
    if (dims[i] != 0 && total > kMaxIdxBytes / dims[i]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: IDX dimensions are too large (dimension %d is %d; the payload "
          "would exceed the %d-byte limit)",
          path, i, dims[i], kMaxIdxBytes));
    }
    total *= dims[i];
  }
  return total;
}

// A raw file's size is known up front: it must be exactly header + payload.
absl::Status CheckRawSize(const std::string& path, size_t ndims,
                          uint64_t payload) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot determine file size: ", ec.message()));
  }
  const uint64_t expected = 4 + 4 * uint64_t{ndims} + payload;
  if (size != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: IDX dimensions imply a %d-byte file but it has %d bytes%s", path,
        expected, size, size < expected ? " (truncated)" : ""));
  }
  return absl::OkStatus();
}

// Reads the payload in chunks, so that memory grows with the bytes actually
// present: a gzip header that lies about its dimensions costs at most one
// chunk beyond the real data.
absl::Status ReadPayload(gzFile f, const std::string& path, uint64_t total,
                         std::vector<uint8_t>& data) {
  constexpr uint64_t kChunk = uint64_t{16} << 20;
  data.clear();
  data.reserve(std::min(total, kChunk));
  while (data.size() < total) {
    const uint64_t old = data.size();
    const uint64_t want = std::min(total - old, kChunk);
    data.resize(old + want);
    TAGI_ASSIGN_OR_RETURN(const uint64_t got,
                          ReadSome(f, path, data.data() + old, want));
    if (got != want) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: truncated IDX file: dimensions imply %d data bytes, found %d",
          path, total, old + got));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> CheckCounts(const IdxArray& images,
                                   const IdxArray& labels,
                                   const std::string& images_path,
                                   const std::string& labels_path) {
  if (images.dims.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        images_path, ": an image file needs at least 2 dimensions, found ",
        images.dims.size()));
  }
  if (labels.dims.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        labels_path, ": a label file needs exactly 1 dimension, found ",
        labels.dims.size()));
  }
  if (images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample counts differ: ", images_path, " has ", images.dims[0],
        " images but ", labels_path, " has ", labels.dims[0], " labels"));
  }
  if (images.dims[0] == 0 || images.data.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(images_path, ": contains no samples (or empty images)"));
  }
  return images.data.size() / images.dims[0];
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdx(const std::string& path) {
  TAGI_ASSIGN_OR_RETURN(const auto first, PeekMagic(path));
  const bool is_gzip = first[0] == 0x1f && first[1] == 0x8b;
  if (!is_gzip && (first[0] != 0 || first[1] != 0)) {
    // The bytes themselves are not shown: the message reaches API clients,
    // and the file may be anything.
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: not an IDX file (its first two bytes are neither 00 00, IDX, nor 1f 8b, gzip)",
        path));
  }
  // gzread passes raw files through unchanged, so one code path reads both.
  GzFile file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot open IDX file ", path, ": ", std::strerror(errno)));
  }
  gzbuffer(file.get(), 1 << 20);
  IdxArray out;
  TAGI_ASSIGN_OR_RETURN(const uint64_t total,
                        ReadHeader(file.get(), path, out.dims));
  if (!is_gzip) {
    TAGI_RETURN_IF_ERROR(CheckRawSize(path, out.dims.size(), total));
  }
  TAGI_RETURN_IF_ERROR(ReadPayload(file.get(), path, total, out.data));
  uint8_t extra[64];
  TAGI_ASSIGN_OR_RETURN(const uint64_t trailing,
                        ReadSome(file.get(), path, extra, sizeof(extra)));
  if (trailing != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: IDX file is longer than its dimensions say (%d bytes of data "
        "expected, found trailing bytes)",
        path, total));
  }
  return out;
}

absl::StatusOr<Dataset> LoadIdxClassification(const std::string& images,
                                              const std::string& labels,
                                              int num_classes, size_t limit) {
  if (num_classes < 1 || num_classes > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_classes must be in [1, 256] for IDX labels, got ", num_classes));
  }
  TAGI_ASSIGN_OR_RETURN(const IdxArray image_array, ReadIdx(images));
  TAGI_ASSIGN_OR_RETURN(const IdxArray label_array, ReadIdx(labels));
  TAGI_ASSIGN_OR_RETURN(const size_t input_dim,
                        CheckCounts(image_array, label_array, images, labels));
  size_t n = image_array.dims[0];
  if (limit != 0) n = std::min(n, limit);

  Dataset out;
  out.num_samples = n;
  out.input_dim = input_dim;
  out.num_classes = num_classes;
  if (image_array.dims.size() == 3) {  // [n][rows][cols]: one-channel images
    out.channels = 1;
    out.height = image_array.dims[1];
    out.width = image_array.dims[2];
  }
  out.labels.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t label = label_array.data[i];
    if (label >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          labels, ": label of sample ", i, " is ", static_cast<int>(label),
          ", outside [0, ", num_classes, ")"));
    }
    out.labels[i] = label;
  }
  out.inputs.resize(n * input_dim);
  for (size_t i = 0; i < out.inputs.size(); ++i) {
    out.inputs[i] = static_cast<float>(image_array.data[i]) / 255.0f;
  }
  return out;
}

}  // namespace tagi::data
