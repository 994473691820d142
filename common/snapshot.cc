#include "common/snapshot.h"

#include <cstring>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_format.h"
#include "common/byte_codec.h"
#include "common/checksum.h"
#include "common/status.h"

namespace tagi {
namespace {

constexpr char kMagic[8] = {'T', 'A', 'G', 'I', 'S', 'N', 'A', 'P'};
constexpr size_t kHeaderBytes = sizeof(kMagic) + 4 + 8;
constexpr size_t kTrailerBytes = 4;

absl::StatusOr<std::vector<float>> GetFloats(ByteReader& r, const char* count, const char* what) {
  TAGI_ASSIGN_OR_RETURN(const uint64_t n, r.GetU64(count));
  // Compare against the bytes present before multiplying: n * 4 may overflow.
  if (n > r.remaining() / sizeof(float)) {
    return absl::DataLossError(absl::StrFormat(
        "snapshot announces %d %s but only %d bytes remain", n, what, r.remaining()));
  }
  std::vector<float> v(n);
  TAGI_RETURN_IF_ERROR(r.GetF32Array(what, v));
  return v;
}

absl::Status DecodeBody(ByteReader& r, uint32_t version, Snapshot& s) {
  TAGI_ASSIGN_OR_RETURN(s.job_id, r.GetString("job id", kMaxSnapshotJobIdBytes));
  TAGI_ASSIGN_OR_RETURN(s.generation, r.GetU64("generation"));
  TAGI_ASSIGN_OR_RETURN(s.epoch, r.GetU64("epoch"));
  TAGI_ASSIGN_OR_RETURN(s.step, r.GetU64("step"));
  TAGI_ASSIGN_OR_RETURN(s.global_step, r.GetU64("global step"));
  for (uint64_t& word : s.rng_state) {
    TAGI_ASSIGN_OR_RETURN(word, r.GetU64("rng state"));
  }
  TAGI_ASSIGN_OR_RETURN(s.sigma_v, r.GetF32("sigma_v"));
  TAGI_ASSIGN_OR_RETURN(s.parameters, GetFloats(r, "parameter count", "parameters"));
  TAGI_ASSIGN_OR_RETURN(s.architecture, r.GetString("architecture", kMaxSnapshotArchitectureBytes));
  if (version >= 2) {
    TAGI_ASSIGN_OR_RETURN(s.state, GetFloats(r, "state count", "state values"));
  }
  if (version >= 3) {
    TAGI_ASSIGN_OR_RETURN(s.world, r.GetU32("world"));
    TAGI_ASSIGN_OR_RETURN(s.offset, r.GetU64("offset"));
  }
  if (version >= 4) {
    TAGI_ASSIGN_OR_RETURN(s.model_header,
                          r.GetString("model header", kMaxSnapshotModelHeaderBytes));
  }
  if (version >= 5) {
    TAGI_ASSIGN_OR_RETURN(s.epoch_micros, r.GetU64("epoch time"));
    TAGI_ASSIGN_OR_RETURN(s.epoch_correct, r.GetU64("epoch correct predictions"));
    TAGI_ASSIGN_OR_RETURN(s.epoch_samples, r.GetU64("epoch samples"));
    if (s.epoch_correct > s.epoch_samples) {
      return absl::DataLossError(
          absl::StrFormat("snapshot counts %d correct predictions out of %d samples",
                          s.epoch_correct, s.epoch_samples));
    }
  }
  if (r.remaining() != 0) {
    return absl::DataLossError(
        absl::StrFormat("snapshot body has %d unexpected trailing bytes", r.remaining()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeSnapshot(const Snapshot& s) {
  ABSL_RAW_CHECK(s.job_id.size() <= kMaxSnapshotJobIdBytes, "snapshot job id too long");
  ABSL_RAW_CHECK(s.architecture.size() <= kMaxSnapshotArchitectureBytes,
                 "snapshot architecture too long");
  ABSL_RAW_CHECK(s.model_header.size() <= kMaxSnapshotModelHeaderBytes,
                 "snapshot model header too long");
  ByteWriter body;
  body.PutString(s.job_id);
  body.PutU64(s.generation);
  body.PutU64(s.epoch);
  body.PutU64(s.step);
  body.PutU64(s.global_step);
  for (const uint64_t word : s.rng_state) body.PutU64(word);
  body.PutF32(s.sigma_v);
  body.PutU64(s.parameters.size());
  body.PutF32Array(s.parameters);
  body.PutString(s.architecture);
  body.PutU64(s.state.size());
  body.PutF32Array(s.state);
  body.PutU32(s.world);
  body.PutU64(s.offset);
  body.PutString(s.model_header);
  body.PutU64(s.epoch_micros);
  body.PutU64(s.epoch_correct);
  body.PutU64(s.epoch_samples);

  ByteWriter file;
  file.PutBytes(kMagic, sizeof(kMagic));
  file.PutU32(kSnapshotVersion);
  file.PutU64(body.data().size());
  file.PutBytes(body.data().data(), body.data().size());
  file.PutU32(Crc32(file.data().data(), file.data().size()));
  return file.Release();
}

absl::StatusOr<Snapshot> DecodeSnapshot(std::span<const char> bytes) {
  if (bytes.size() < kHeaderBytes + kTrailerBytes ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(
        absl::StrFormat("not a tagi snapshot (bad magic or only %d bytes)", bytes.size()));
  }
  // The CRC trailer is checked before the version so that a flipped bit in
  // the version field reads as corruption (DataLoss), not as a newer format.
  // Every format version keeps the magic and the trailing CRC-32.
  ByteReader trailer(bytes.subspan(bytes.size() - kTrailerBytes));
  TAGI_ASSIGN_OR_RETURN(const uint32_t crc, trailer.GetU32("checksum"));
  const uint32_t actual = Crc32(bytes.data(), bytes.size() - kTrailerBytes);
  if (crc != actual) {
    return absl::DataLossError(absl::StrFormat(
        "snapshot checksum mismatch (stored %08x, computed %08x): the snapshot is corrupt or "
        "truncated",
        crc, actual));
  }
  ByteReader header(bytes.subspan(sizeof(kMagic)));
  TAGI_ASSIGN_OR_RETURN(const uint32_t version, header.GetU32("format version"));
  if (version < 1 || version > kSnapshotVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("snapshot format version %d is not supported (this build reads 1 to %d)",
                        version, kSnapshotVersion));
  }
  TAGI_ASSIGN_OR_RETURN(const uint64_t body_len, header.GetU64("body length"));
  const size_t present = bytes.size() - kHeaderBytes - kTrailerBytes;
  if (body_len != present) {
    return absl::DataLossError(
        absl::StrFormat("snapshot is truncated or padded: body of %d bytes announced, %d present",
                        body_len, present));
  }
  Snapshot s;
  ByteReader body(bytes.subspan(kHeaderBytes, present));
  TAGI_RETURN_IF_ERROR(DecodeBody(body, version, s));
  return s;
}

}  // namespace tagi
