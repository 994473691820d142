// NPZ: a zip archive of .npy files (numpy.savez / savez_compressed), read
// with libzip from bytes in memory.
//
// Only the wanted members ("x_train.npy", ...) are extracted, each stored or
// deflated (other methods, encryption and multi-disk archives are refused),
// each at most `max_bytes` uncompressed as the directory says and as the
// data really inflates to (a member that inflates past its declared size or
// fails its CRC is an error, so a zip bomb stops at the cap). An archive
// with more than kMaxNpzEntries entries is refused before any is read.
// Errors are InvalidArgument naming `path` (and the member), never quoting
// data. Pure functions; thread-safe.
#ifndef TAGI_WORKER_DATA_NPZ_H_
#define TAGI_WORKER_DATA_NPZ_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tagi::data {

inline constexpr uint64_t kMaxNpzEntries = 1024;

// The members of `zip` named in `wanted` (without ".npy"), by name; a
// wanted name that is absent is simply missing from the result.
absl::StatusOr<std::map<std::string, std::vector<uint8_t>>> ReadNpzMembers(
    std::span<const uint8_t> zip, const std::string& path, const std::vector<std::string>& wanted,
    uint64_t max_bytes);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_NPZ_H_
