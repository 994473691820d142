// Plan: where every buffer of a network lives, for a given maximum batch.
//
// MakePlan flattens the layer tree into steps in forward order (a LAYER
// step runs one layer; an ADD step merges a residual block's branches) over
// numbered boundaries (the units between steps: [0] is the data, the last
// is the output), and lays out four arenas, as offsets in floats:
//   parameters  [mu of N][var of N]: every layer's blocks, depth first, in
//               layer order, packed (the model file and snapshot layout;
//               the delta arena mirrors it; nested layers included);
//   state       S floats of non-parameter state (e.g. running statistics);
//   derived     model-sized buffers an engine keeps per layer (mu_w^2);
//   workspace   one call's working memory, shared by every layer (the
//               largest of their needs: a convolution's im2col columns);
//   batch       per boundary its units (mu, var), jcb when an activation
//               produced it, its innovations (delta) and one partial
//               innovation buffer per extra consumer (a fork: the input of a
//               residual block); per layer its scratch. Sized for max_batch.
//               Units, jcb and scratch live from the forward to the
//               backward and have places of their own. Innovations live
//               only in the backward, from the backward of the boundary's
//               last consumer (which writes them; the output's: before the
//               backward, from the head, and through it) to the backward
//               of its producer (which reads them): the slots of
//               boundaries whose lives do not overlap share memory (a
//               first-fit pass in backward order), so a chain keeps about
//               two boundaries' innovations instead of all of them.
// Batch and derived offsets are multiples of align_floats (CUDA: 64 floats
// = 256 bytes for cuBLAS); parameter offsets are packed.
//
// Backward runs the steps in reverse: before a step's backward, the
// partials of its output boundary are added into that boundary's delta
// (every consumer has run by then); each step writes the innovations of
// each input into its own slot (Step::in_delta), except for the data
// boundary, whose innovations nobody needs.
//
// Fusion (PlanOptions::fuse_activations): an elementwise activation whose
// output only the next step reads, and that step a norm, is marked absorbed
// (Step::absorbed). An engine then runs no pass of its own for it: the
// norm's statistics pass computes the activation's moments from the
// activation's input, its backward writes the activation's input
// innovations (jcb applied on the way). The planner keeps the activation's
// input units and innovation slots live through the norm's step.
//
// Pure function of (architecture, options); the Plan is a plain value.
#ifndef TAGI_SPEC_PLAN_H_
#define TAGI_SPEC_PLAN_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "spec/kinds.h"
#include "spec/network.h"

namespace tagi::spec {

// A Gaussian tensor in the batch arena: its means and its variances.
struct Slot {
  size_t mu = 0;
  size_t var = 0;
  bool operator==(const Slot&) const = default;
};

struct PlannedBlock {
  size_t offset = 0;  // in each half of the parameter arena
  BlockSpec spec;
};

struct PlannedState {
  size_t offset = 0;  // in the state arena
  StateSpec spec;
};

struct BoundaryPlan {
  Shape shape;
  size_t size = 0;        // units per sample
  bool is_input = false;  // the data: variance zero, no innovations
  bool has_jcb = false;
  Slot units;
  size_t jcb = 0;  // when has_jcb
  Slot delta;      // not for the input
  std::vector<Slot> partials;
  int producer = -1;  // step index; -1 for the input
  // The last step reading it in forward order (the step that absorbs that
  // reader, when one does: Step::absorbed); the number of steps for the
  // output. Its innovations (delta and partials) are live during the
  // backward of steps producer..last_consumer; the output's from the head's
  // update through the whole backward (engines read them back after it).
  int last_consumer = -1;
  // Its units are read by no backward (every consumer is an activation, a
  // pool or a residual add: KindRules::backward_reads_input) and it is
  // neither the input nor the output: they live only in the forward, from
  // its producer's step to its last consumer's, in the shared region.
  bool units_transient = false;
  // Its variances are read by no backward (KindRules::
  // backward_reads_input_variance; true for every boundary but the input
  // and the output): units.var lives only in the forward, like the units of
  // a transient boundary, even where the means are kept.
  bool var_transient = false;
};

struct PlannedLayer {
  LayerSpec spec;    // the layer's own attributes (never a RESIDUAL)
  std::string path;  // "layers[2].residual.main[0]"
  Shape in;
  Shape out;
  size_t first_block = 0;  // into Plan::blocks
  size_t num_blocks = 0;
  size_t first_state = 0;  // into Plan::states
  size_t num_states = 0;
  size_t derived = 0;  // offset in the derived arena
  size_t derived_count = 0;
  size_t scratch = 0;  // offset in the batch arena
  size_t scratch_per_sample = 0;
};

struct Step {
  enum class Op : uint8_t { kLayer, kAdd };
  Op op = Op::kLayer;
  int layer = -1;  // kLayer: index into Plan::layers
  int in = -1;     // kAdd: the main branch's output
  int in2 = -1;    // kAdd: the shortcut's output (the block input for the identity)
  int out = -1;
  Slot in_delta;   // where backward writes the innovations of `in`
  Slot in2_delta;  // kAdd: of `in2`
  // An elementwise activation the next step runs inside its own passes
  // (PlanOptions::fuse_activations): that step reads this step's input
  // units and writes its in_delta; this step's output has no other reader,
  // and its innovations are never written.
  bool absorbed = false;
};

// The CPU engine's alignment of batch and derived offsets (64 B: a cache
// line); the CUDA engine aligns to 64 floats for cuBLAS.
inline constexpr size_t kCpuAlignFloats = 16;

struct PlanOptions {
  size_t max_batch = 1;
  size_t align_floats = kCpuAlignFloats;
  // Mark every elementwise activation whose only reader is the next step,
  // a kind that absorbs activations (KindRules::absorbs_activation), as
  // absorbed (Step::absorbed), and extend its input's lives to that step.
  // The CUDA engine's fused kernels; the CPU engine runs every step.
  bool fuse_activations = false;
};

struct Plan {
  Architecture arch;
  size_t max_batch = 0;
  std::vector<PlannedLayer> layers;
  std::vector<PlannedBlock> blocks;
  std::vector<PlannedState> states;
  std::vector<BoundaryPlan> boundaries;
  std::vector<Step> steps;
  size_t num_parameters = 0;  // N
  size_t num_state = 0;       // S
  size_t derived_floats = 0;
  size_t batch_floats = 0;
  // Of batch_floats: the shared region (transient units in the forward,
  // innovations in the backward), and what the innovations would take with
  // a place for every slot (the memory the sharing saves).
  size_t delta_floats = 0;
  size_t delta_floats_unshared = 0;
  // The transient units (units_transient, var_transient) placed in the
  // shared region: what they would take in places of their own.
  size_t transient_unit_floats = 0;
  size_t workspace_floats = 0;  // shared by every layer (the largest need)

  const BoundaryPlan& input() const { return boundaries.front(); }
  const BoundaryPlan& output() const { return boundaries.back(); }
};

// InvalidArgument when the architecture is invalid (ValidateArchitecture's
// message) or max_batch is 0 or align_floats is 0.
absl::StatusOr<Plan> MakePlan(const Architecture& arch, const PlanOptions& options);

// OK when no two buffers of the batch arena that are live at once overlap:
// kept units, jcb and scratch never overlap anything; transient units live
// in the forward from their producer's step to their last consumer's, and
// innovation slots in the backward of those steps (the output's from the
// head's update on), and two of them may share memory only when their
// lives are disjoint.
// Every buffer within batch_floats. Internal naming the first overlap
// otherwise. For tests and tools (quadratic in the slots).
absl::Status CheckPlanMemory(const Plan& plan);

}  // namespace tagi::spec

#endif  // TAGI_SPEC_PLAN_H_
