// Model files: a trained network on disk.
//
// Layout (all integers and floats little-endian, whatever the host):
//   "TAGIMODL"            8-byte magic
//   u32 format version    kModelFileVersion (2)
//   u64 body length
//   body:  u32 A, A bytes: the architecture, a serialised tagi.v1.Network
//            (input shape, one tagged record per layer: its kind's message of
//            the Layer oneof with its attributes, blocks nested; the head)
//          4 x (u32 count, f32[count])  input mean/std, target mean/std
//          u64 N, f32[N] means, f32[N] variances (the model's arena)
//          u64 S, f32[S] state (e.g. running statistics, in plan order)
//          version 3 only: u32 K, K x (u32 n, n bytes) class names
//   u32 CRC-32 of every byte before it
// A model with class names (trained on an image folder) is written as
// version 3; one without them as version 2, byte for byte as before.
// Version 1 files (a flat layer list: u32 count, then per layer u8 kind,
// u32 in, u32 out, f32 slope; u8 head kind, u32 classes; no state) still
// load: their input is flat, as wide as the first layer.
// The parameters are written as the arena holds them, so a CPU and a CUDA
// build read the same file. Decoding never trusts a length before checking
// it against the bytes present; a truncated or altered file is DataLoss, an
// unknown version is FailedPrecondition. Decoded statistics fit the
// architecture: as many standard deviations as means, and none, one or one
// per column (inputs: input_width; targets: output_width for regression,
// none for classification). Pure functions; thread-safe.
#ifndef TAGI_WORKER_ENGINE_MODEL_FILE_H_
#define TAGI_WORKER_ENGINE_MODEL_FILE_H_

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/architecture.h"

namespace tagi::engine {

inline constexpr uint32_t kModelFileVersion = 2;
inline constexpr uint32_t kModelFileVersionWithClassNames = 3;
inline constexpr size_t kMaxClassNameBytes = 255;
inline constexpr size_t kMaxArchitectureBytes = size_t{1} << 20;
inline constexpr size_t kMaxModelFileBytes = size_t{16} << 30;

// How inputs (and regression targets) were standardised for training, so
// that a saved model evaluates new data the same way. Empty vectors mean
// "not standardised".
struct Preprocessing {
  std::vector<float> input_mean;
  std::vector<float> input_std;
  std::vector<float> target_mean;
  std::vector<float> target_std;
  // Classification: the name of each class (label i is class_names[i]),
  // or empty when the data has no names. Non-empty names of at most
  // kMaxClassNameBytes, as many as the head's classes.
  std::vector<std::string> class_names;
  bool operator==(const Preprocessing&) const = default;
};

struct ModelFile {
  Architecture architecture;
  Preprocessing preprocessing;
  std::vector<float> parameters;  // [mu N][var N]
  std::vector<float> state;       // S floats
};

// REQUIRES: arch is valid; parameters and state fit it.
std::string EncodeModelFile(const Architecture& arch, const Preprocessing& prep,
                            std::span<const float> parameters,
                            std::span<const float> state = {});
absl::StatusOr<ModelFile> DecodeModelFile(std::span<const char> bytes);

// What a model file holds besides its parameters and state (magic
// "TAGIMHDR", the architecture, the preprocessing, the class names), as
// rank 0 puts it in its snapshots (common/snapshot.h model_header), so that
// the coordinator can serve a stopped job's newest snapshot as a model file.
// REQUIRES: arch is valid.
std::string EncodeModelHeader(const Architecture& arch, const Preprocessing& prep);
// The model file of `header` with these parameters and state: DataLoss when
// the header does not decode or they do not fit its architecture.
absl::StatusOr<std::string> ModelFileFromHeader(std::span<const char> header,
                                                std::span<const float> parameters,
                                                std::span<const float> state);

absl::Status SaveModelFile(const std::string& path, const Architecture& arch,
                           const Preprocessing& prep, std::span<const float> parameters,
                           std::span<const float> state = {});
absl::StatusOr<ModelFile> LoadModelFile(const std::string& path);

// OK when equal; otherwise FailedPrecondition naming both architectures.
absl::Status CheckSameArchitecture(const Architecture& expected, const Architecture& found);

// OK when `parameters` is an arena [mu N][var N] whose every mean is finite
// and every variance finite and positive, and every state value is finite;
// InvalidArgument naming the first one that is not (what a model or
// snapshot from a broken or rogue rank holds).
absl::Status CheckParameterValues(std::span<const float> parameters,
                                  std::span<const float> state);

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_MODEL_FILE_H_
