// Architecture: the shape of a sequential TAGI network and its output head.
//
// It is what a model file stores besides the parameters, and what a JobSpec
// turns into. Layer kinds use the numbers of tagi.v1.Layer.Kind, which are
// part of the model file format and never change meaning.
// Plain value type; thread-compatible.
#ifndef TAGI_WORKER_ENGINE_ARCHITECTURE_H_
#define TAGI_WORKER_ENGINE_ARCHITECTURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tagi/v1/job.pb.h"

namespace tagi::engine {

enum class LayerKind : uint8_t {
  kLinear = 1,
  kRelu = 2,
  kLeakyRelu = 3,
  kSigmoid = 4,
  kTanh = 5,
  kSoftplus = 6,
  kMixtureRelu = 7,
};

struct LayerDesc {
  LayerKind kind = LayerKind::kLinear;
  uint32_t in = 0;     // LINEAR only
  uint32_t out = 0;    // LINEAR only
  float slope = 0.0f;  // LEAKY_RELU only
  bool operator==(const LayerDesc&) const = default;
};

enum class HeadKind : uint8_t { kClassification = 1, kRegression = 2 };

struct HeadDesc {
  HeadKind kind = HeadKind::kClassification;
  uint32_t num_classes = 0;  // classification only
  bool operator==(const HeadDesc&) const = default;
};

struct Architecture {
  std::vector<LayerDesc> layers;
  HeadDesc head;
  bool operator==(const Architecture&) const = default;

  uint32_t input_width() const;   // in of the first layer
  uint32_t output_width() const;  // out of the last LINEAR layer
  uint64_t num_parameters() const;  // weights and biases (means; as many variances)
  // "784-LINEAR-100-RELU-...-11 hsm(10)", for messages.
  std::string ToString() const;
};

// Checks that the layers chain and match the head, that a LEAKY_RELU's
// slope is in (0, 1) and that fields a layer kind does not use (widths of
// activations, slopes of other layers) are 0. Used on architectures read
// from files, which may be hostile.
absl::Status ValidateArchitecture(const Architecture& arch);

// The layers and head of a job (normally one that passed ValidateJobSpec;
// the result is validated again here).
absl::StatusOr<Architecture> ArchitectureFromJobSpec(const tagi::v1::JobSpec& spec);

const char* LayerKindName(LayerKind kind);

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_ARCHITECTURE_H_
