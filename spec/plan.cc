#include "spec/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tagi::spec {
namespace {

using tagi::v1::Layer;

class Planner {
 public:
  Planner(Plan& plan, size_t align) : plan_(plan), align_(align) {}

  // Plans `layers` reading boundary `in`; returns their output boundary.
  int Sequence(const std::vector<LayerSpec>& layers, int in, const std::string& path) {
    int cur = in;
    for (size_t i = 0; i < layers.size(); ++i) {
      const LayerSpec& l = layers[i];
      const std::string at = absl::StrCat(path, "[", i, "]");
      if (l.kind == Layer::RESIDUAL) {
        const int m = Sequence(l.main, cur, at + ".residual.main");
        const int s =
            l.shortcut.empty() ? cur : Sequence(l.shortcut, cur, at + ".residual.shortcut");
        Step step;
        step.op = Step::Op::kAdd;
        step.in = m;
        step.in2 = s;
        cur = AddStep(step, plan_.boundaries[static_cast<size_t>(m)].shape, false);
      } else {
        cur = LayerStep(l, cur, at);
      }
    }
    return cur;
  }

  // Offsets in the batch arena, once every boundary and consumer is known.
  void LayOutBatch() {
    size_t size = 0;
    auto take = [&](size_t count) {
      const size_t at = size;
      size += (count + align_ - 1) / align_ * align_;
      return at;
    };
    auto take_slot = [&](size_t count) { return Slot{take(count), take(count)}; };
    const size_t b = plan_.max_batch;
    for (size_t i = 0; i < plan_.boundaries.size(); ++i) {
      BoundaryPlan& bp = plan_.boundaries[i];
      const size_t n = b * bp.size;
      bp.units = take_slot(n);
      if (bp.has_jcb) bp.jcb = take(n);
      if (bp.is_input) continue;
      bp.delta = take_slot(n);
      const std::vector<std::pair<int, int>>& users = consumers_[i];
      for (size_t c = 0; c < users.size(); ++c) {
        Slot slot = bp.delta;
        if (c > 0) {
          slot = take_slot(n);
          bp.partials.push_back(slot);
        }
        Step& step = plan_.steps[static_cast<size_t>(users[c].first)];
        (users[c].second == 0 ? step.in_delta : step.in2_delta) = slot;
      }
    }
    for (PlannedLayer& l : plan_.layers) l.scratch = take(b * l.scratch_per_sample);
    plan_.batch_floats = size;
  }

 private:
  int LayerStep(const LayerSpec& l, int in, const std::string& at) {
    const KindRules& rules = *RulesOf(l.kind);
    const Shape in_shape = plan_.boundaries[static_cast<size_t>(in)].shape;
    PlannedLayer pl;
    pl.spec = l;
    pl.path = at;
    pl.in = in_shape;
    pl.out = OutputShape({l}, in_shape);
    pl.first_block = plan_.blocks.size();
    for (const BlockSpec& block : rules.Parameters(l, in_shape)) {
      plan_.blocks.push_back({plan_.num_parameters, block});
      plan_.num_parameters += block.count;
    }
    pl.num_blocks = plan_.blocks.size() - pl.first_block;
    pl.first_state = plan_.states.size();
    for (const StateSpec& state : rules.State(l, in_shape)) {
      plan_.states.push_back({plan_.num_state, state});
      plan_.num_state += state.count;
    }
    pl.num_states = plan_.states.size() - pl.first_state;
    pl.derived_count = rules.Derived(l, in_shape);
    pl.derived = plan_.derived_floats;
    plan_.derived_floats += (pl.derived_count + align_ - 1) / align_ * align_;
    pl.scratch_per_sample = rules.ScratchPerSample(l, in_shape);
    plan_.workspace_floats =
        std::max(plan_.workspace_floats, static_cast<size_t>(rules.Workspace(l, in_shape)));
    plan_.layers.push_back(std::move(pl));
    Step step;
    step.op = Step::Op::kLayer;
    step.layer = static_cast<int>(plan_.layers.size() - 1);
    step.in = in;
    return AddStep(step, plan_.layers.back().out, rules.produces_jcb());
  }

  int AddStep(Step step, const Shape& out_shape, bool has_jcb) {
    const int index = static_cast<int>(plan_.steps.size());
    BoundaryPlan out;
    out.shape = out_shape;
    out.size = static_cast<size_t>(out_shape.size());
    out.has_jcb = has_jcb;
    out.producer = index;
    plan_.boundaries.push_back(out);
    consumers_.emplace_back();
    step.out = static_cast<int>(plan_.boundaries.size() - 1);
    consumers_[static_cast<size_t>(step.in)].push_back({index, 0});
    if (step.in2 >= 0) consumers_[static_cast<size_t>(step.in2)].push_back({index, 1});
    plan_.steps.push_back(step);
    return step.out;
  }

  Plan& plan_;
  size_t align_;
  // Per boundary: the (step, input edge) pairs that read it, in step order.
  std::vector<std::vector<std::pair<int, int>>> consumers_{1};
};

}  // namespace

absl::StatusOr<Plan> MakePlan(const Architecture& arch, const PlanOptions& options) {
  if (absl::Status st = ValidateArchitecture(arch); !st.ok()) return st;
  if (options.max_batch == 0 || options.align_floats == 0) {
    return absl::InvalidArgumentError("plan: max_batch and align_floats must be at least 1");
  }
  Plan plan;
  plan.arch = arch;
  plan.max_batch = options.max_batch;
  BoundaryPlan input;
  input.shape = arch.input;
  input.size = static_cast<size_t>(arch.input.size());
  input.is_input = true;
  plan.boundaries.push_back(input);
  Planner planner(plan, options.align_floats);
  planner.Sequence(arch.layers, 0, "layers");
  planner.LayOutBatch();
  return plan;
}

}  // namespace tagi::spec
