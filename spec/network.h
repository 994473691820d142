// The model spec: everything known about a network before it runs.
//
// An Architecture is a tree of LayerSpecs (a RESIDUAL layer holds its main
// and shortcut branches), the shape of one input sample and the output
// head. It is a plain value: what a job describes (spec/network_proto.h
// builds it from a JobSpec), what a model file stores, and what the engines
// build from (through the plan, spec/plan.h). Layer kinds are the proto's
// enumeration, tagi::v1::Layer::Kind: there is no other.
//
// Each kind's rules (fields, shape, validation, parameter and state blocks)
// live in one file under spec/kinds/ (spec/kinds.h is their interface).
// ValidateArchitecture walks the tree, infers every shape and answers every
// problem with its path: "layers[2].residual.main[0].in_features: ...".
//
// Pure functions and value types; thread-safe.
#ifndef TAGI_SPEC_NETWORK_H_
#define TAGI_SPEC_NETWORK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tagi/v1/job.pb.h"

namespace tagi::spec {

using LayerKind = tagi::v1::Layer::Kind;

// Limits that keep a hostile spec or file from asking for absurd sizes.
inline constexpr int kMaxLayers = 256;         // every layer, nested ones included
inline constexpr int kMaxNesting = 16;         // residual blocks inside blocks
inline constexpr uint32_t kMaxLayerWidth = 1 << 16;
inline constexpr uint64_t kMaxUnitsPerSample = uint64_t{1} << 26;  // any boundary
inline constexpr uint64_t kMaxParameters = uint64_t{1} << 31;

// The shape of one sample at a layer boundary: (channels, height, width);
// flat data is (features, 1, 1).
struct Shape {
  uint32_t c = 0;
  uint32_t h = 1;
  uint32_t w = 1;
  uint64_t size() const { return uint64_t{c} * h * w; }
  bool flat() const { return h == 1 && w == 1; }
  bool operator==(const Shape&) const = default;
  std::string ToString() const;  // "784" or "3x32x32"
};

// One layer. Each kind uses some of the attributes; the others stay at
// their defaults (validation insists, so that equal networks compare equal).
using Padding = tagi::v1::Layer::Padding;

struct LayerSpec {
  LayerKind kind = tagi::v1::Layer::KIND_UNSPECIFIED;
  uint32_t in = 0;     // LINEAR: in_features; CONV2D: in_channels; BATCH_NORM: num_features (0: any)
  uint32_t out = 0;    // LINEAR: out_features; CONV2D: out_channels
  float slope = 0.0f;  // LEAKY_RELU: negative slope
  // CONV2D and the pools: the window (stride resolved: never 0).
  uint32_t kernel = 0;
  uint32_t stride = 0;
  uint32_t padding = 0;
  Padding padding_type = tagi::v1::Layer::PADDING_UNSPECIFIED;
  bool bias = false;       // CONV2D, BATCH_NORM, LAYER_NORM (resolved: unset means true)
  float eps = 0.0f;        // BATCH_NORM, LAYER_NORM
  float momentum = 0.0f;   // BATCH_NORM: weight of the old running value
  std::vector<LayerSpec> main;      // RESIDUAL
  std::vector<LayerSpec> shortcut;  // RESIDUAL; empty: identity
  bool operator==(const LayerSpec&) const = default;
};

enum class HeadKind : uint8_t { kClassification = 1, kRegression = 2 };

struct HeadSpec {
  HeadKind kind = HeadKind::kClassification;
  uint32_t num_classes = 0;  // classification only
  // Classification: one output per class observed one-hot (the last layer
  // is REMAX or CLOSED_FORM_SOFTMAX) instead of hierarchical softmax.
  bool one_hot = false;
  // Regression: [mean, noise] pairs through EVEN_EXP, no sigma_v.
  bool heteroscedastic = false;
  bool operator==(const HeadSpec&) const = default;
  bool hierarchical_softmax() const { return kind == HeadKind::kClassification && !one_hot; }
  // Output units per target (regression): 2 when heteroscedastic.
  uint32_t units_per_target() const { return heteroscedastic ? 2 : 1; }
};

// Whether a kind is an output activation (REMAX, CLOSED_FORM_SOFTMAX,
// EVEN_EXP): allowed only as the last top-level layer, under its head.
bool IsOutputActivation(LayerKind kind);

struct Architecture {
  Shape input;
  std::vector<LayerSpec> layers;
  HeadSpec head;
  bool operator==(const Architecture&) const = default;

  // REQUIRES (for the three below): ValidateArchitecture is OK.
  uint32_t input_width() const { return static_cast<uint32_t>(input.size()); }
  uint32_t output_width() const;    // size of the last boundary
  uint64_t num_parameters() const;  // means (as many variances)
  uint64_t num_state() const;       // non-parameter state floats (e.g. running statistics)
  // "784-LINEAR-100-RELU-...-11 hsm(10)", blocks as "RES[...|id]", for messages.
  std::string ToString() const;
};

// Where a window's first row/column starts before the image: the padding
// for SYMMETRIC, 0 for BOTTOM_RIGHT (docs/maths.md section 9).
inline uint32_t PaddingOffset(const LayerSpec& l) {
  return l.padding_type == tagi::v1::Layer::SYMMETRIC ? l.padding : 0;
}

// The name of a kind ("LINEAR"), or "KIND_<n>" for an unknown number.
std::string KindName(LayerKind kind);

// Shape inference and every rule of every kind; the output of the last
// layer must fit the head. InvalidArgument naming every problem with its
// path, joined by "; ". Architectures read from files (which may be
// hostile) and built from jobs both pass through here.
absl::Status ValidateArchitecture(const Architecture& arch);
// The same, appending each problem to `problems` (for job validation,
// which reports the job's other fields beside them).
void CheckArchitecture(const Architecture& arch, std::vector<std::string>* problems);

// The smallest per-rank training batch the network can learn from: 2 when
// a BATCH_NORM normalises single values over the batch (a flat input, or
// a 1x1 map), whose variance over one sample would be 0/0 (the reference's
// B2); else 1. `path` (may be null) receives that layer's path.
// REQUIRES: valid.
uint32_t MinTrainBatch(const Architecture& arch, std::string* path);

// The output shape of a layer sequence from `input`. REQUIRES: valid.
Shape OutputShape(const std::vector<LayerSpec>& layers, const Shape& input);

}  // namespace tagi::spec

#endif  // TAGI_SPEC_NETWORK_H_
