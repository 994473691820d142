// Fuzzes snapshot decoding (DecodeSnapshot): the bytes a worker uploads and
// the coordinator hands to the next generation, i.e. bytes from the network.
//
// As for model files, each input is decoded as it is and "resealed" (body
// length and CRC-32 rewritten to match) so that mutations reach the body
// decoder. Besides the sanitizers and libFuzzer's malloc limit, it checks
// that a refusal is DataLoss or FailedPrecondition with a message, and that
// a decoded snapshot re-encodes to exactly the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "common/snapshot.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// The u32 format version after the 8-byte magic (0 when too short).
uint32_t FormatVersion(std::span<const char> bytes) {
  if (bytes.size() < 12) return 0;
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[8 + i]);
  return v;
}

void Check(std::span<const char> bytes) {
  auto snapshot = tagi::DecodeSnapshot(bytes);
  if (!snapshot.ok()) {
    const auto code = snapshot.status().code();
    FUZZ_CHECK(
        (code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kFailedPrecondition) &&
            !snapshot.status().message().empty(),
        "refused with %s", snapshot.status().ToString().c_str());
    return;
  }
  FUZZ_CHECK(snapshot->job_id.size() <= tagi::kMaxSnapshotJobIdBytes, "job id too long");
  FUZZ_CHECK(snapshot->architecture.size() <= tagi::kMaxSnapshotArchitectureBytes,
             "architecture too long");
  const std::string again = tagi::EncodeSnapshot(*snapshot);
  // The current version re-encodes to the same bytes; an older one (read
  // for compatibility, written no more: 1 and 2) to a file that decodes
  // alike.
  if (FormatVersion(bytes) == tagi::kSnapshotVersion) {
    FUZZ_CHECK(
        again.size() == bytes.size() && std::memcmp(again.data(), bytes.data(), bytes.size()) == 0,
        "re-encoding gives %zu bytes, not the %zu decoded", again.size(), bytes.size());
    return;
  }
  const auto back = tagi::DecodeSnapshot(std::span<const char>(again.data(), again.size()));
  FUZZ_CHECK(back.ok(), "the re-encoded older version file does not decode: %s",
             back.status().ToString().c_str());
  FUZZ_CHECK(tagi::EncodeSnapshot(*back) == again, "the re-encoded older version file decodes to another content");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const char> raw(reinterpret_cast<const char*>(data), size);
  Check(raw);
  if (auto sealed = tagi::fuzz::Reseal(raw)) Check(*sealed);
  return 0;
}
