// IDX reader: the file format of MNIST and Fashion-MNIST.
//
// An IDX file is a 4-byte magic (0x00 0x00 <type> <ndims>), ndims big-endian
// uint32 dimension sizes, then the elements in row-major order. Files may be
// stored raw or gzip-compressed (recognised by the 1f 8b gzip magic). Only
// element type 0x08 (unsigned byte) is supported.
//
// Hostile input never crashes: the header is validated before any large
// allocation, the decompressed payload is capped at kMaxIdxBytes, and the
// payload must be exactly the product of the dimensions (no more, no less).
//
// Errors: NotFound when the file does not exist, PermissionDenied when it
// cannot be opened, InvalidArgument for anything wrong with its contents.
// Every message names the path. Functions are thread-compatible (no shared
// state).
#ifndef TAGI_WORKER_DATA_IDX_H_
#define TAGI_WORKER_DATA_IDX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace tagi::data {

// Largest payload (product of the dimensions, in bytes) a file may claim.
inline constexpr uint64_t kMaxIdxBytes = uint64_t{4} << 30;  // 4 GiB

struct IdxArray {
  std::vector<uint32_t> dims;  // at least one dimension
  std::vector<uint8_t> data;   // product(dims) bytes, row-major
};

// Reads one IDX file of unsigned bytes, raw or gzip.
absl::StatusOr<IdxArray> ReadIdx(const std::string& path);

// Reads an image file ([n][rows][cols] or [n][d]; any trailing dimensions
// are flattened into input_dim) and a label file ([n]) into a
// classification Dataset with pixel values scaled to [0, 1] (value / 255).
// Uses the first `limit` samples (0: all). InvalidArgument when the sample
// counts differ, when the set is empty, or when a used label is
// >= num_classes (the message names the sample index and the value).
// REQUIRES: nothing; num_classes outside [1, 256] is InvalidArgument.
absl::StatusOr<Dataset> LoadIdxClassification(const std::string& images,
                                              const std::string& labels,
                                              int num_classes, size_t limit);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_IDX_H_
