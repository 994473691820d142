// Layer: one layer kind on the CPU, as the Model (the executor of a plan,
// spec/plan.h) drives it.
//
// A layer owns no buffers: every call gets a LayerIo of views into the
// model's arenas, laid out by the plan (its input and output units, the
// innovations of its output and where those of its input go, its
// parameter, delta and state blocks, its derived buffers and its scratch).
// So a layer runs at any place in the graph, nested blocks included, and
// no step allocates. Backward receives the normalised innovations of its
// output units (docs/maths.md section 2) and fills its parameter deltas
// and, when delta_in is set, the innovations of its input units.
//
// One file per kind (linear.cc, activation.cc, head_layers.cc, conv2d.cc,
// pool.cc, norm.cc), each registering its kinds' factories with the CPU
// engine's registry (cpu_layers.h). Not thread-safe.
#ifndef TAGI_WORKER_ENGINE_LAYER_H_
#define TAGI_WORKER_ENGINE_LAYER_H_

#include <array>
#include <cstddef>
#include <functional>
#include <span>

#include "spec/plan.h"
#include "worker/engine/gaussian.h"
#include "worker/engine/thread_team.h"

namespace tagi::engine {

// Training runs batch statistics and updates running state; evaluation
// reads the running state (only layers with state tell the two apart).
enum class Mode { kTrain, kEval };

inline constexpr size_t kMaxBlocksPerLayer = 4;

// Synchronised batch statistics: `sum` adds a vector over every replica's
// batch in place (an all-reduce, the same calls in the same order on every
// rank), `world` replicas each with the same batch. A failed sum returns
// false; the layer then finishes on whatever it has and the executor
// reports the failure after the step (see Model::TakeSyncStatus).
struct BatchSync {
  std::function<bool(std::span<float>)> sum;
  size_t world = 1;
};

struct LayerIo {
  size_t batch = 0;
  ConstGaussianView in;       // [batch][input size]
  bool input_is_data = false;  // variance zero: its products may be skipped
  GaussianView out;           // [batch][output size]
  float* out_jcb = nullptr;   // the kind's jcb, when it writes one
  ConstGaussianView delta_out;
  GaussianView delta_in;      // mu == nullptr: the input needs no innovations
  size_t num_blocks = 0;
  std::array<GaussianView, kMaxBlocksPerLayer> params{};  // per parameter block
  std::array<GaussianView, kMaxBlocksPerLayer> deltas{};  // mirrors params
  std::array<size_t, kMaxBlocksPerLayer> block_size{};
  float* state = nullptr;
  float* derived = nullptr;
  float* scratch = nullptr;
  float* workspace = nullptr;  // shared by every layer: valid during one call only
  const BatchSync* sync = nullptr;  // training only, when statistics span the replicas
  ThreadTeam* team = nullptr;       // splits elementwise loops (worker/engine/thread_team.h)
  // Backward only, may be null: a layer that finishes its parameter deltas
  // in pieces calls it with a pointer into its mu delta blocks; from there
  // to the end of its blocks every delta (mu and var) is final, so the
  // all-reduce may take them while the rest of the backward runs.
  const std::function<void(const float*)>* deltas_final = nullptr;
};

// Where an engine's arenas begin, in host or device memory alike: the
// parameters and deltas ([mu][var], the var half `var_half` floats after
// the mu half), the state, the derived buffers and the batch arena.
struct ArenaBases {
  float* params = nullptr;
  float* deltas = nullptr;
  size_t var_half = 0;
  float* state = nullptr;
  float* derived = nullptr;
  float* batch = nullptr;
  float* workspace = nullptr;
};

// The model-sized part of planned layer `layer`'s io (its parameter, delta
// and state blocks and derived buffers): what Refresh and ApplyStep use.
LayerIo ModelIo(const spec::Plan& plan, const ArenaBases& arenas, size_t layer);
// The whole io of a LAYER step over `batch` samples.
LayerIo StepIo(const spec::Plan& plan, const ArenaBases& arenas, const spec::Step& step,
               size_t batch);

// The derived buffers of a weight block of `count` entries (LINEAR and
// CONV2D): mu_w^2, then mu_w^2 + var_w, back to back at `derived`.
void RefreshWeightSquares(ConstGaussianView w, size_t count, float* derived);

class Layer {
 public:
  virtual ~Layer() = default;
  virtual void Forward(const LayerIo& io, Mode mode) = 0;
  virtual void Backward(const LayerIo& io) = 0;
  // Recomputes the derived buffers after the parameters changed.
  virtual void Refresh(const LayerIo& /*io*/) {}
  // The capped update with the variance floor (docs/maths.md section 7) over
  // every parameter block, then Refresh. Kinds may fuse the two.
  virtual void ApplyStep(const LayerIo& io, float inv_cap, float variance_floor);
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_LAYER_H_
