#include "common/checksum.h"

#include <zlib.h>

#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"
#include "common/rng.h"

namespace tagi {

uint32_t Crc32(const void* data, size_t size, uint32_t crc) {
  const auto* bytes = static_cast<const Bytef*>(data);
  // zlib takes a uInt length: feed huge buffers in pieces.
  while (size > 0) {
    const size_t piece = size > (1u << 30) ? (1u << 30) : size;
    crc = static_cast<uint32_t>(crc32(crc, bytes, static_cast<uInt>(piece)));
    bytes += piece;
    size -= piece;
  }
  return crc;
}

uint64_t Fingerprint64(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t h = 0x243f6a8885a308d3ULL ^ (size * 0x9e3779b97f4a7c15ULL);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    // Little-endian value of the bytes, whatever the host order.
    if constexpr (std::endian::native == std::endian::big) {
      word = __builtin_bswap64(word);
    }
    h = (h ^ Mix64(word)) * 0xff51afd7ed558ccdULL;
    h ^= h >> 32;
  }
  uint64_t tail = 0;
  for (size_t k = 0; i + k < size; ++k) {
    tail |= static_cast<uint64_t>(bytes[i + k]) << (8 * k);
  }
  h = (h ^ Mix64(tail ^ 0x5851f42d4c957f2dULL)) * 0xc4ceb9fe1a85ec53ULL;
  return Mix64(h);
}

uint64_t ModelFingerprint(const float* parameters, size_t num_parameters, const float* state,
                          size_t num_state) {
  const uint64_t params = Fingerprint64(parameters, num_parameters * sizeof(float));
  if (num_state == 0) return params;
  const uint64_t both[2] = {params, Fingerprint64(state, num_state * sizeof(float))};
  return Fingerprint64(both, sizeof(both));
}

std::string FingerprintHex(uint64_t fingerprint) {
  return absl::StrFormat("%016x", fingerprint);
}

}  // namespace tagi
