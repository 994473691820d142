// Snapshots: the complete state a training group needs to resume exactly.
//
// Rank 0 encodes a Snapshot every K steps and uploads it; the coordinator
// keeps the bytes (coordinator/snapshot_store.h) and hands the newest good
// one to the next generation. Layout (integers and floats little-endian,
// whatever the host), mirroring the model file (worker/engine/model_file.h):
//   "TAGISNAP"            8-byte magic
//   u32 format version    kSnapshotVersion
//   u64 body length
//   body:  string job_id (u32 length + bytes, at most kMaxSnapshotJobIdBytes)
//          u64 generation, u64 epoch, u64 step, u64 global_step
//          4 x u64 rng state, f32 sigma_v
//          u64 parameter count P, f32[P] parameters (the arena [mu N][var N])
//          string architecture (at most kMaxSnapshotArchitectureBytes)
//          u64 state count S, f32[S] state (version 2; e.g. running
//          statistics, in plan order)
//          u32 world, u64 offset (version 3: the world the snapshot was
//          taken at, and the sampler's position in the epoch, in samples)
//          string model_header (version 4: the model file's architecture and
//          preprocessing, worker/engine/model_file.h EncodeModelHeader, at
//          most kMaxSnapshotModelHeaderBytes; empty when unknown), so that a
//          stopped job's snapshot can be served as a model file
//          u64 epoch micros, u64 epoch correct, u64 epoch samples (version
//          5: the epoch before the snapshot point, so that its metrics span
//          every generation that ran it: training time in microseconds, and
//          rank 0's correct training predictions out of its samples counted)
//   u32 CRC-32 of every byte before it
// Version 1 snapshots (no state section) still decode, with empty state;
// versions 1 and 2 with world 0 (unknown: the fixed world of their job);
// versions 1 to 3 with an empty model header; versions 1 to 4 with an
// epoch begun at the snapshot point (zero time and counts).
// Decoding never trusts a length before checking it against the bytes
// present and never allocates more than the input could hold. A truncated,
// padded or altered snapshot is DataLoss; an intact snapshot (its CRC
// matches) of an unknown format version is FailedPrecondition naming it.
// Every format version keeps the magic and the CRC-32 trailer, so the
// checksum is verified first. Pure functions; thread-safe.
#ifndef TAGI_COMMON_SNAPSHOT_H_
#define TAGI_COMMON_SNAPSHOT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tagi {

inline constexpr uint32_t kSnapshotVersion = 5;
inline constexpr size_t kMaxSnapshotModelHeaderBytes = size_t{8} << 20;
inline constexpr size_t kMaxSnapshotJobIdBytes = 256;
inline constexpr size_t kMaxSnapshotArchitectureBytes = size_t{1} << 20;
// The largest snapshot file a reader accepts (the model file's limit).
inline constexpr size_t kMaxSnapshotBytes = size_t{16} << 30;

struct Snapshot {
  std::string job_id;
  uint64_t generation = 0;
  uint64_t epoch = 0;
  uint64_t step = 0;  // the next step within the epoch
  uint64_t global_step = 0;
  std::array<uint64_t, 4> rng_state{};
  float sigma_v = 0.0f;
  std::vector<float> parameters;  // the model arena [mu N][var N]
  // Opaque bytes describing the model (e.g. the model file's architecture
  // section or a fingerprint string); the restorer compares them.
  std::string architecture;
  std::vector<float> state;  // the model's non-parameter state (S floats)
  // The world of the generation that took it (0: a version 1 or 2 snapshot)
  // and where the epoch's next step starts in its padded sample sequence
  // (worker/data/sampler.h): with a fixed world step * world * batch; an
  // elastic job's epoch may have run under several worlds.
  uint32_t world = 0;
  uint64_t offset = 0;
  // What a model file holds besides parameters and state (opaque here).
  std::string model_header;
  // The epoch so far (0 at an epoch's start): its training time, and rank
  // 0's correct training predictions out of the samples it counted
  // (correct <= samples, or the snapshot is refused).
  uint64_t epoch_micros = 0;
  uint64_t epoch_correct = 0;
  uint64_t epoch_samples = 0;
};

// REQUIRES: job_id, architecture and model_header within the limits above (CHECKed: a
// snapshot that could not be decoded must never be written).
std::string EncodeSnapshot(const Snapshot& snapshot);

absl::StatusOr<Snapshot> DecodeSnapshot(std::span<const char> bytes);

}  // namespace tagi

#endif  // TAGI_COMMON_SNAPSHOT_H_
