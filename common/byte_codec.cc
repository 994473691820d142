#include "common/byte_codec.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"

namespace tagi {
namespace {

template <typename T>
T ToLittle(T v) {
  if constexpr (std::endian::native == std::endian::big) {
    if constexpr (sizeof(T) == 4) return __builtin_bswap32(v);
    if constexpr (sizeof(T) == 8) return __builtin_bswap64(v);
  }
  return v;
}

}  // namespace

void ByteWriter::PutU32(uint32_t v) {
  v = ToLittle(v);
  PutBytes(&v, sizeof(v));
}

void ByteWriter::PutU64(uint64_t v) {
  v = ToLittle(v);
  PutBytes(&v, sizeof(v));
}

void ByteWriter::PutF32(float v) { PutU32(std::bit_cast<uint32_t>(v)); }

void ByteWriter::PutBytes(const void* data, size_t size) {
  buf_.append(static_cast<const char*>(data), size);
}

void ByteWriter::PutString(const std::string& s) {
  PutU32(static_cast<uint32_t>(s.size()));
  PutBytes(s.data(), s.size());
}

void ByteWriter::PutF32Array(std::span<const float> values) {
  if constexpr (std::endian::native == std::endian::little) {
    PutBytes(values.data(), values.size_bytes());
  } else {
    for (float v : values) PutF32(v);
  }
}

absl::Status ByteReader::Need(const char* what, size_t size) const {
  if (size > remaining()) {
    return absl::DataLossError(absl::StrFormat(
        "truncated data: %s needs %d bytes at offset %d but only %d remain",
        what, size, pos_, remaining()));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint8_t> ByteReader::GetU8(const char* what) {
  if (auto s = Need(what, 1); !s.ok()) return s;
  return static_cast<uint8_t>(data_[pos_++]);
}

absl::StatusOr<uint32_t> ByteReader::GetU32(const char* what) {
  if (auto s = Need(what, 4); !s.ok()) return s;
  uint32_t v;
  std::memcpy(&v, data_.data() + pos_, 4);
  pos_ += 4;
  return ToLittle(v);
}

absl::StatusOr<uint64_t> ByteReader::GetU64(const char* what) {
  if (auto s = Need(what, 8); !s.ok()) return s;
  uint64_t v;
  std::memcpy(&v, data_.data() + pos_, 8);
  pos_ += 8;
  return ToLittle(v);
}

absl::StatusOr<float> ByteReader::GetF32(const char* what) {
  auto bits = GetU32(what);
  if (!bits.ok()) return bits.status();
  return std::bit_cast<float>(*bits);
}

absl::StatusOr<std::string> ByteReader::GetString(const char* what,
                                                  size_t max_size) {
  auto size = GetU32(what);
  if (!size.ok()) return size.status();
  if (*size > max_size) {
    return absl::DataLossError(absl::StrFormat(
        "%s: length %d exceeds the limit of %d", what, *size, max_size));
  }
  if (auto s = Need(what, *size); !s.ok()) return s;
  std::string out(data_.data() + pos_, *size);
  pos_ += *size;
  return out;
}

absl::Status ByteReader::GetF32Array(const char* what, std::span<float> out) {
  if (auto s = Need(what, out.size_bytes()); !s.ok()) return s;
  // An empty span (e.g. of an empty vector) may have a null data(), and
  // memcpy's pointers must be valid even for 0 bytes.
  if (out.empty()) return absl::OkStatus();
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out.data(), data_.data() + pos_, out.size_bytes());
    pos_ += out.size_bytes();
  } else {
    for (float& v : out) v = *GetF32(what);
  }
  return absl::OkStatus();
}

absl::Status ByteReader::Skip(const char* what, size_t size) {
  if (auto s = Need(what, size); !s.ok()) return s;
  pos_ += size;
  return absl::OkStatus();
}

}  // namespace tagi
