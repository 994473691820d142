// NPY: NumPy's array file format, parsed from bytes without copying them.
//
// A file is the magic "\x93NUMPY", a major/minor version (1.0: u16 header
// length; 2.0 and 3.0: u32), then a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (N, ...), } padded with
// spaces and a newline, then the elements in C order.
//
// Accepted element types: float32, float64, uint8, int8, int16, int32,
// int64, uint16, uint32, uint64, bool (little-endian or byte-sized; '>'
// multi-byte types and Fortran order are refused with their names). The
// header is at most kMaxNpyHeaderBytes, the rank at most kMaxNpyRank, the
// payload at most `max_bytes` and exactly the product of the shape times the
// element size: a shorter file is "truncated", a longer one "has trailing
// bytes". Errors are InvalidArgument naming `name` and the fault; they
// quote no header text. Pure functions; thread-safe.
#ifndef TAGI_WORKER_DATA_NPY_H_
#define TAGI_WORKER_DATA_NPY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tagi::data {

inline constexpr size_t kMaxNpyHeaderBytes = 65535;
inline constexpr size_t kMaxNpyRank = 8;

enum class NpyType {
  kFloat32,
  kFloat64,
  kUint8,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUint16,
  kUint32,
  kUint64,
  kBool
};

struct NpyArray {
  NpyType type = NpyType::kFloat32;
  std::vector<uint64_t> shape;    // empty: a scalar
  std::span<const uint8_t> data;  // product(shape) * ElementBytes(type) bytes, C order
  uint64_t count() const;
};

size_t ElementBytes(NpyType type);
// "float32", "uint8", ...
const char* NpyTypeName(NpyType type);
bool IsFloat(NpyType type);

// Parses `bytes` (a whole .npy file); the result points into `bytes`.
absl::StatusOr<NpyArray> ParseNpy(std::span<const uint8_t> bytes, const std::string& name,
                                  uint64_t max_bytes);

// Element `i` as a double (REQUIRES: i < count()).
double NpyElement(const NpyArray& a, uint64_t i);

// The bytes of a .npy file holding `shape` float32 values (little-endian),
// version 1.0: what the tests and the seeds write.
std::string EncodeNpyFloat32(const std::vector<uint64_t>& shape, std::span<const float> values);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_NPY_H_
