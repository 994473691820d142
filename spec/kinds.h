// KindRules: everything the model spec knows about one layer kind, in one
// place per kind (spec/kinds/<kind>.cc): its fields in the job proto, its
// shape rule and validation, its parameter blocks (count, fan-in, fan-out,
// init rule), its non-parameter state blocks, and the buffers an engine
// keeps for it (derived: model-sized, e.g. mu_w^2; scratch: per sample).
//
// Adding a layer kind: docs/engine.md "Adding a layer kind" (its rules are
// one file in spec/kinds/ and one line in RulesOf, spec/network.cc).
//
// The rules are immutable objects; thread-safe.
#ifndef TAGI_SPEC_KINDS_H_
#define TAGI_SPEC_KINDS_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spec/network.h"

namespace tagi::spec {

// How a parameter block is initialised (docs/maths.md section 1).
enum class InitRule : uint8_t {
  kWeight,  // mean ~ N(0, s^2), variance (gain_w s)^2; s from fan-in/out
  kBias,    // mean ~ N(0, s^2), variance (gain_b s)^2
  kOne,     // a normalisation's scale: mean 1, variance 1 / fan_in (no gain)
  kZero,    // a normalisation's shift: mean 0, variance 1 / fan_in (no gain)
};

struct BlockSpec {
  uint64_t count = 0;
  uint32_t fan_in = 0;
  uint32_t fan_out = 0;
  InitRule init = InitRule::kWeight;
};

struct StateSpec {
  uint64_t count = 0;
  float initial = 0.0f;
};

// Where validation is: the problems found so far and how deep in blocks.
struct CheckContext {
  std::vector<std::string>* problems;
  int depth = 0;
  int layers_seen = 0;
  void Add(std::string problem) { problems->push_back(std::move(problem)); }
};

class KindRules {
 public:
  virtual ~KindRules() = default;
  // The oneof field of the kind in tagi.v1.Layer ("linear").
  virtual const char* field() const = 0;
  // Whether its forward writes a jcb (an activation) at its output.
  virtual bool produces_jcb() const { return false; }
  // Whether its backward reads its input's units (means and variances).
  // When no consumer of a boundary does (activations read their jcb,
  // pools their scratch or nothing), the planner shares the boundary's
  // units once the forward is past its last reader (spec/plan.h).
  // Both engines' layers must keep to what this says.
  virtual bool backward_reads_input() const { return true; }
  // Whether that backward reads its input's variances too. None does today
  // (Linear and the convolution read the means, for their weights' deltas,
  // the norms the means, for gamma's), so the variances of every boundary
  // but the input and the output live only in the forward.
  virtual bool backward_reads_input_variance() const { return false; }
  // Whether it is an elementwise activation: each output unit's moments and
  // jcb from its input unit alone (RELU, LEAKY_RELU, SIGMOID, TANH,
  // SOFTPLUS, MIXTURE_RELU; not the heads' output activations).
  virtual bool elementwise_activation() const { return false; }
  // Whether an engine may run an elementwise activation that only it reads
  // inside its own passes (the norms: the activation's moments in the
  // statistics pass, its jcb on the input innovations; PlanOptions::
  // fuse_activations).
  virtual bool absorbs_activation() const { return false; }
  // Its token in a network's one-line description ("-256", "-CONV(32,k3,s1)",
  // "-RELU"): by default "-" and the kind's name.
  virtual std::string Describe(const LayerSpec& spec) const;
  // The least batch that gives its statistics two values each with input
  // shape `in` (a batch norm over a flat input: 2); 1 for every other kind.
  virtual uint32_t MinBatch(const LayerSpec&, const Shape&) const { return 1; }

  // The kind's own message of the oneof into / out of the spec.
  virtual void FromProto(const tagi::v1::Layer& layer, const std::string& path, CheckContext& ctx,
                         LayerSpec& spec) const = 0;
  virtual void ToProto(const LayerSpec& spec, tagi::v1::Layer& layer) const = 0;

  // Checks the attributes against the input shape. Returns the output
  // shape, or nullopt after adding problems prefixed by `path`.
  virtual std::optional<Shape> Infer(const LayerSpec& spec, const Shape& in,
                                     const std::string& path, CheckContext& ctx) const = 0;

  // REQUIRES for the rest: Infer accepted (spec, in).
  virtual std::vector<BlockSpec> Parameters(const LayerSpec&, const Shape&) const { return {}; }
  virtual std::vector<StateSpec> State(const LayerSpec&, const Shape&) const { return {}; }
  virtual uint64_t Derived(const LayerSpec&, const Shape&) const { return 0; }
  virtual uint64_t ScratchPerSample(const LayerSpec&, const Shape&) const { return 0; }
  // Floats of working memory for one call, shared by every layer (layers
  // run one at a time): e.g. a convolution's im2col columns of one sample.
  virtual uint64_t Workspace(const LayerSpec&, const Shape&) const { return 0; }
};

// The rules of a kind; nullptr for KIND_UNSPECIFIED and unknown numbers.
const KindRules* RulesOf(LayerKind kind);

// The one-line description of a sequence ("-256-RELU-10"): each layer's Describe.
std::string DescribeLayers(const std::vector<LayerSpec>& layers);

// Shape inference over a sequence (used by the top level and by blocks).
std::optional<Shape> InferSequence(const std::vector<LayerSpec>& layers, const Shape& in,
                                   const std::string& path, CheckContext& ctx);

// How many samples a convolution puts side by side in one set of im2col
// columns, so that its matrix products are wide enough to run near the
// BLAS's peak (at least about kConvColumns columns) when a sample's output
// map is small.
inline constexpr uint64_t kConvColumns = 2048;
inline uint64_t ConvChunk(uint64_t positions) {
  return positions >= kConvColumns ? 1 : kConvColumns / positions;
}

// The CPU engine's direct convolutions (worker/engine/direct_conv.h): the
// samples in one oneDNN call (enough output positions per call, from the
// shape alone, so the bits do not depend on the thread count), the calls in
// flight at once (the workspace holds a slot for each), and the workspace
// they need: the blocked weights (three copies) and per slot a blocked input
// and output, channels rounded up to oneDNN's blocks of 16.
inline constexpr uint64_t kDirectConvSlots = 8;
inline uint64_t DirectConvSlice(uint64_t positions) {
  constexpr uint64_t kPositions = 64;
  return positions >= kPositions ? 1 : (kPositions + positions - 1) / positions;
}
// Backward-weights takes, per product, a blocked input, output innovations
// and weight deltas of its largest piece (at most ConvChunk samples).
inline uint64_t DirectConvWorkspace(uint64_t in, uint64_t in_positions, uint64_t out,
                                    uint64_t out_positions, uint64_t kernel) {
  const auto blocks = [](uint64_t c) { return (c + 15) / 16 * 16; };
  const uint64_t weights = blocks(in) * blocks(out) * kernel * kernel;
  const uint64_t slot = DirectConvSlice(out_positions) *
                        (blocks(in) * in_positions + blocks(out) * out_positions);
  const uint64_t piece = ConvChunk(out_positions) *
                         (blocks(in) * in_positions + blocks(out) * out_positions);
  return std::max(3 * weights + kDirectConvSlots * slot, 2 * (piece + weights));
}

// Per-kind rule objects (spec/kinds/*.cc).
const KindRules& LinearRules();
const KindRules& ActivationRules(LayerKind kind);
const KindRules& ResidualRules();
const KindRules& Conv2dRules();
const KindRules& PoolRules(LayerKind kind);  // AVG_POOL2D, MAX_POOL2D
const KindRules& BatchNormRules();
const KindRules& LayerNormRules();

// Conversion of a layer list from the proto (both forms; spec/network_proto.cc).
std::vector<LayerSpec> LayersFromProto(
    const google::protobuf::RepeatedPtrField<tagi::v1::Layer>& layers, const std::string& path,
    CheckContext& ctx);
void LayersToProto(const std::vector<LayerSpec>& layers,
                   google::protobuf::RepeatedPtrField<tagi::v1::Layer>* out);

}  // namespace tagi::spec

#endif  // TAGI_SPEC_KINDS_H_
