#include "worker/engine/layer.h"

#include "worker/engine/elementwise.h"

namespace tagi::engine {

LayerIo ModelIo(const spec::Plan& plan, const ArenaBases& a, size_t layer) {
  const spec::PlannedLayer& pl = plan.layers[layer];
  LayerIo io;
  io.num_blocks = pl.num_blocks;
  for (size_t k = 0; k < pl.num_blocks; ++k) {
    const spec::PlannedBlock& b = plan.blocks[pl.first_block + k];
    io.params[k] = {a.params + b.offset, a.params + a.var_half + b.offset};
    io.deltas[k] = {a.deltas + b.offset, a.deltas + a.var_half + b.offset};
    io.block_size[k] = b.spec.count;
  }
  if (pl.num_states > 0) io.state = a.state + plan.states[pl.first_state].offset;
  io.derived = a.derived + pl.derived;
  return io;
}

LayerIo StepIo(const spec::Plan& plan, const ArenaBases& a, const spec::Step& step,
               size_t batch) {
  const size_t layer = static_cast<size_t>(step.layer);
  const spec::BoundaryPlan& in = plan.boundaries[static_cast<size_t>(step.in)];
  const spec::BoundaryPlan& out = plan.boundaries[static_cast<size_t>(step.out)];
  auto at = [&](const spec::Slot& slot) {
    return GaussianView{a.batch + slot.mu, a.batch + slot.var};
  };
  LayerIo io = ModelIo(plan, a, layer);
  io.batch = batch;
  io.in = {a.batch + in.units.mu, a.batch + in.units.var};
  io.input_is_data = in.is_input;
  io.out = at(out.units);
  io.out_jcb = out.has_jcb ? a.batch + out.jcb : nullptr;
  io.delta_out = {a.batch + out.delta.mu, a.batch + out.delta.var};
  if (!in.is_input) io.delta_in = at(step.in_delta);
  io.scratch = a.batch + plan.layers[layer].scratch;
  io.workspace = a.workspace;
  return io;
}

void RefreshWeightSquares(ConstGaussianView w, size_t count, float* derived) {
  float* mu_w_sq = derived;
  float* w_second = derived + count;
  for (size_t i = 0; i < count; ++i) {
    const float m = w.mu[i];
    mu_w_sq[i] = m * m;
    w_second[i] = m * m + w.var[i];
  }
}

void Layer::ApplyStep(const LayerIo& io, float inv_cap, float variance_floor) {
  for (size_t k = 0; k < io.num_blocks; ++k) {
    const GaussianView p = io.params[k];
    const GaussianView d = io.deltas[k];
    for (size_t i = 0; i < io.block_size[k]; ++i) {
      elementwise::CappedStep(inv_cap, variance_floor, d.mu[i], d.var[i], &p.mu[i], &p.var[i]);
    }
  }
  Refresh(io);
}

}  // namespace tagi::engine
