// Checksums for files and parameter buffers.
//
// Crc32: zlib's CRC-32, used to detect corruption of model and snapshot
// files. Fingerprint64: a 64-bit hash of raw bytes, used as the "parameter
// checksum" that users compare between runs (bit-identical models have the
// same fingerprint). Both are pure functions; thread-safe.
#ifndef TAGI_COMMON_CHECKSUM_H_
#define TAGI_COMMON_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace tagi {

uint32_t Crc32(const void* data, size_t size, uint32_t crc = 0);

// 64-bit hash (multiply-mix over 8-byte words, then a length-dependent
// finaliser). Not cryptographic; stable across platforms and builds.
uint64_t Fingerprint64(const void* data, size_t size);

// The "parameter checksum" of a model: Fingerprint64 of its parameter
// arena, combined with that of its state (running statistics) when it has
// any, so models without state keep their checksums.
uint64_t ModelFingerprint(const float* parameters, size_t num_parameters, const float* state,
                          size_t num_state);

// 16 lowercase hex digits.
std::string FingerprintHex(uint64_t fingerprint);

}  // namespace tagi

#endif  // TAGI_COMMON_CHECKSUM_H_
