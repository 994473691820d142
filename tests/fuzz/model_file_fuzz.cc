// Fuzzes model file decoding (DecodeModelFile): the bytes tagi-train --eval,
// the coordinator's model store and its REST download hand to the decoder;
// and the model header of a snapshot (ModelFileFromHeader).
//
// Each input is decoded twice: as it is (magic, version, body length and
// CRC checks), and "resealed", with the body length and CRC-32 rewritten to
// match, so that mutations reach the body decoder instead of dying at the
// checksum. Besides the sanitizers (and libFuzzer's malloc limit, which
// catches allocations a hostile length could cause), it checks that every
// refusal is DataLoss or FailedPrecondition with a message, and that a
// decoded file is valid, re-encodes to exactly the same bytes, and that its
// standardisation statistics can be applied as tagi-train --eval applies
// them (data::Apply CHECKs their shape).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.h"
#include "worker/data/standardize.h"
#include "worker/engine/model_file.h"

namespace {

// Equal bit patterns (NaNs with their payloads included).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The u32 format version after the 8-byte magic (0 when too short).
uint32_t FormatVersion(std::span<const char> bytes) {
  if (bytes.size() < 12) return 0;
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[8 + i]);
  return v;
}

// As worker/train_main.cc's RunEval: inputs of the architecture's width;
// regression targets of its output width, classification data none.
void ApplyStatistics(const tagi::engine::ModelFile& file) {
  const auto& arch = file.architecture;
  const auto& p = file.preprocessing;
  const tagi::data::Standardizer input{p.input_mean, p.input_std};
  const tagi::data::Standardizer target{p.target_mean, p.target_std};
  std::vector<float> inputs(2 * size_t{arch.input_width()}, 0.5f);
  if (!input.empty()) tagi::data::Apply(input, inputs, arch.input_width());
  const bool regression = arch.head.kind == tagi::engine::HeadKind::kRegression;
  const size_t outputs = regression ? arch.output_width() : 0;
  std::vector<float> targets(2 * outputs, 0.5f);
  if (!target.empty()) tagi::data::Apply(target, targets, outputs);
}

void Check(std::span<const char> bytes) {
  auto file = tagi::engine::DecodeModelFile(bytes);
  if (!file.ok()) {
    const auto code = file.status().code();
    FUZZ_CHECK(
        (code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kFailedPrecondition) &&
            !file.status().message().empty(),
        "refused with %s", file.status().ToString().c_str());
    return;
  }
  const auto& arch = file->architecture;
  FUZZ_CHECK(tagi::engine::ValidateArchitecture(arch).ok(), "decoded an invalid architecture");
  FUZZ_CHECK(file->parameters.size() == 2 * arch.num_parameters(), "%zu parameters for %s",
             file->parameters.size(), arch.ToString().c_str());
  FUZZ_CHECK(tagi::engine::CheckSameArchitecture(arch, arch).ok(),
             "architecture differs from itself");
  ApplyStatistics(*file);
  const std::string again =
      tagi::engine::EncodeModelFile(arch, file->preprocessing, file->parameters, file->state);
  // A snapshot's model header of it, with its parameters, is the same file.
  const std::string header = tagi::engine::EncodeModelHeader(arch, file->preprocessing);
  auto from_header = tagi::engine::ModelFileFromHeader(header, file->parameters, file->state);
  FUZZ_CHECK(from_header.ok() && *from_header == again,
             "the model header does not give the file: %s",
             from_header.status().ToString().c_str());
  // The current version re-encodes to the same bytes; an older one (read
  // for compatibility, written no more) to a file that decodes alike.
  if (FormatVersion(bytes) != 1) {
    FUZZ_CHECK(
        again.size() == bytes.size() && std::memcmp(again.data(), bytes.data(), bytes.size()) == 0,
        "re-encoding gives %zu bytes, not the %zu decoded", again.size(), bytes.size());
    return;
  }
  const auto back = tagi::engine::DecodeModelFile(std::span<const char>(again.data(), again.size()));
  FUZZ_CHECK(back.ok(), "the re-encoded version 1 file does not decode: %s",
             back.status().ToString().c_str());
  FUZZ_CHECK(back->architecture == arch && back->state.empty() &&
                 SameBits(back->parameters, file->parameters) &&
                 SameBits(back->preprocessing.input_mean, file->preprocessing.input_mean) &&
                 SameBits(back->preprocessing.input_std, file->preprocessing.input_std) &&
                 SameBits(back->preprocessing.target_mean, file->preprocessing.target_mean) &&
                 SameBits(back->preprocessing.target_std, file->preprocessing.target_std), "the re-encoded version 1 file decodes to another content");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const char> raw(reinterpret_cast<const char*>(data), size);
  Check(raw);
  if (auto sealed = tagi::fuzz::Reseal(raw)) Check(*sealed);
  // The same bytes as a snapshot's model header (what a worker sent): no
  // parameters fit any architecture, so it is refused, as DataLoss.
  const auto header = tagi::engine::ModelFileFromHeader(raw, {}, {});
  FUZZ_CHECK(!header.ok() && header.status().code() == absl::StatusCode::kDataLoss,
             "a model header was %s", header.status().ToString().c_str());
  return 0;
}
