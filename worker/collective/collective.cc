#include "worker/collective/collective.h"

#include "absl/strings/str_format.h"

namespace tagi {

absl::Status Collective::AllReduceSumOnWire(std::span<float> data, WirePrecision wire,
                                            absl::Duration timeout) {
  if (wire == WirePrecision::kFp32) return AllReduceSum(data, timeout);
  return absl::UnimplementedError(absl::StrFormat(
      "this collective backend reduces in FP32 only; a %s wire needs the TCP ring",
      WirePrecisionName(wire)));
}

absl::Status ValidateGroupArgs(const char* backend, int rank, int world,
                               const GroupOptions& options) {
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: rank %d of world %d; expected world >= 1 and 0 <= rank < world", backend, rank,
        world));
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: connect_timeout must be positive", backend));
  }
  if (options.hostname.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: hostname must name the address to bind", backend));
  }
  return absl::OkStatus();
}

}  // namespace tagi
