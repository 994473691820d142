// Helpers shared by the fuzz targets of tests/fuzz.
//
// FUZZ_CHECK turns a broken property into a crash that libFuzzer records
// (with the input) like any sanitizer report. MemFile gives path-based
// readers (IDX, CSV) a file that lives in memory: one memfd per process,
// rewritten for every input and reached as /proc/self/fd/N, so a fuzz run
// writes nothing to disk. Reseal rewrites the body length and CRC-32 of a
// model file or snapshot (both: 8-byte magic, u32 version, u64 body length,
// body, u32 CRC-32 of everything before it) to match the bytes present.
// Single-threaded use only, as libFuzzer runs.
#ifndef TAGI_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define TAGI_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>

#include "common/byte_codec.h"
#include "common/checksum.h"

#define FUZZ_CHECK(cond, ...)                                                            \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                 \
      std::fprintf(stderr, "\n");                                                        \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace tagi::fuzz {

class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(memfd_create(name, MFD_CLOEXEC)) {
    FUZZ_CHECK(fd_ >= 0, "memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // Replaces the contents; returns the path to open.
  const std::string& Write(const void* data, size_t size) {
    FUZZ_CHECK(ftruncate(fd_, 0) == 0, "ftruncate failed");
    const char* p = static_cast<const char*>(data);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd_, p + done, size - done, static_cast<off_t>(done));
      FUZZ_CHECK(n > 0, "pwrite failed");
      done += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

// nullopt when the bytes are too short to hold a header and a trailer.
inline std::optional<std::string> Reseal(std::span<const char> bytes) {
  constexpr size_t kBodyLengthOffset = 8 + 4;  // magic, version
  constexpr size_t kHeaderBytes = kBodyLengthOffset + 8;
  constexpr size_t kTrailerBytes = 4;
  if (bytes.size() < kHeaderBytes + kTrailerBytes) return std::nullopt;
  std::string sealed(bytes.begin(), bytes.end());
  ByteWriter length;
  length.PutU64(sealed.size() - kHeaderBytes - kTrailerBytes);
  sealed.replace(kBodyLengthOffset, 8, length.data());
  ByteWriter crc;
  crc.PutU32(Crc32(sealed.data(), sealed.size() - kTrailerBytes));
  sealed.replace(sealed.size() - kTrailerBytes, kTrailerBytes, crc.data());
  return sealed;
}

}  // namespace tagi::fuzz

#endif  // TAGI_TESTS_FUZZ_FUZZ_SUPPORT_H_
