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
  FUZZ_CHECK(
      again.size() == bytes.size() && std::memcmp(again.data(), bytes.data(), bytes.size()) == 0,
      "re-encoding gives %zu bytes, not the %zu decoded", again.size(), bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const char> raw(reinterpret_cast<const char*>(data), size);
  Check(raw);
  if (auto sealed = tagi::fuzz::Reseal(raw)) Check(*sealed);
  return 0;
}
