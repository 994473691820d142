// Little-endian binary encoding with bounds-checked decoding.
//
// Model files and snapshots are written with an explicit byte order
// (little-endian) whatever the host's, so a file moves freely between
// machines and between CPU and CUDA builds. ByteReader never reads past its
// buffer: every getter returns a Status naming what was being read.
// Not thread-safe; both classes are cheap value types.
#ifndef TAGI_COMMON_BYTE_CODEC_H_
#define TAGI_COMMON_BYTE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tagi {

class ByteWriter {
 public:
  void PutU8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void PutU32(uint32_t v);
  void PutU64(uint64_t v);
  void PutF32(float v);
  void PutBytes(const void* data, size_t size);
  // u32 length + bytes.
  void PutString(const std::string& s);
  // Floats, little-endian, without a length prefix.
  void PutF32Array(std::span<const float> values);

  const std::string& data() const { return buf_; }
  std::string Release() { return std::move(buf_); }

 private:
  std::string buf_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const char> data) : data_(data) {}

  // Each getter names `what` in its error, e.g. "layer 2 kind".
  absl::StatusOr<uint8_t> GetU8(const char* what);
  absl::StatusOr<uint32_t> GetU32(const char* what);
  absl::StatusOr<uint64_t> GetU64(const char* what);
  absl::StatusOr<float> GetF32(const char* what);
  // REQUIRES: max_size bounds the allocation a hostile length can cause.
  absl::StatusOr<std::string> GetString(const char* what, size_t max_size);
  absl::Status GetF32Array(const char* what, std::span<float> out);
  absl::Status Skip(const char* what, size_t size);

  size_t remaining() const { return data_.size() - pos_; }
  size_t position() const { return pos_; }

 private:
  absl::Status Need(const char* what, size_t size) const;
  std::span<const char> data_;
  size_t pos_ = 0;
};

}  // namespace tagi

#endif  // TAGI_COMMON_BYTE_CODEC_H_
