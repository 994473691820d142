#include "worker/collective/collective.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tagi {
namespace {

constexpr char kPeerRankPayload[] = "type.tagi.dev/tagi.PeerRank";

}  // namespace

absl::Status Collective::AllReduceSumOnWire(std::span<float> data, WirePrecision wire,
                                            absl::Duration timeout) {
  if (wire == WirePrecision::kFp32) return AllReduceSum(data, timeout);
  return absl::UnimplementedError(absl::StrFormat(
      "this collective backend reduces in FP32 only; a %s wire needs the TCP ring",
      WirePrecisionName(wire)));
}

absl::Status Collective::AllReduceSumAfter(std::span<float> data, void* ready,
                                           WirePrecision wire, absl::Duration timeout) {
  if (ready == nullptr) return AllReduceSumOnWire(data, wire, timeout);
  return absl::UnimplementedError(
      "this collective backend takes host memory only; waiting for a device event needs NCCL");
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

absl::Status WithPeerRank(absl::Status st, int rank) {
  if (!st.ok() && rank >= 0) st.SetPayload(kPeerRankPayload, absl::Cord(absl::StrCat(rank)));
  return st;
}

std::optional<int> PeerRankOf(const absl::Status& st) {
  const auto payload = st.GetPayload(kPeerRankPayload);
  int rank = -1;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &rank) || rank < 0) {
    return std::nullopt;
  }
  return rank;
}

absl::Status WithContext(const absl::Status& st, std::string_view where) {
  absl::Status out(st.code(), std::string(where) + ": " + std::string(st.message()));
  st.ForEachPayload([&out](absl::string_view url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

}  // namespace tagi
