#include "spec/plan.h"

#include <algorithm>
#include <iterator>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"

#include "absl/strings/str_cat.h"

namespace tagi::spec {
namespace {

using tagi::v1::Layer;

// The first step in forward order during whose backward the boundary's
// innovations are live: its producer's, or 0 for the output's (read back
// after the backward: the engines' ReadOutputInnovations).
int FirstLive(const BoundaryPlan& bp, int last_consumer, int num_steps) {
  return last_consumer >= num_steps ? 0 : bp.producer;
}

// A first-fit allocator of offsets in a region that grows at its end.
class FirstFit {
 public:
  size_t Take(size_t count) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second - it->first < count) continue;
      const size_t at = it->first;
      it->first += count;
      if (it->first == it->second) free_.erase(it);
      return at;
    }
    // None fits: grow, taking a free run that ends at the end.
    size_t at = size_;
    if (!free_.empty() && free_.back().second == size_) {
      at = free_.back().first;
      free_.pop_back();
    }
    size_ = at + count;
    return at;
  }
  void Give(size_t at, size_t count) {
    auto it = std::lower_bound(free_.begin(), free_.end(), std::pair{at, at + count});
    it = free_.insert(it, {at, at + count});
    // Merge with the next run, then with the previous one.
    if (auto next = std::next(it); next != free_.end() && it->second == next->first) {
      it->second = next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      if (auto prev = std::prev(it); prev->second == it->first) {
        prev->second = it->second;
        free_.erase(it);
      }
    }
  }
  size_t size() const { return size_; }

 private:
  std::vector<std::pair<size_t, size_t>> free_;  // [begin, end), sorted, disjoint
  size_t size_ = 0;
};

class Planner {
 public:
  Planner(Plan& plan, size_t align) : plan_(plan), align_(align) {}

  // PlanOptions::fuse_activations: an elementwise activation whose output
  // only the next step reads, when that step absorbs activations.
  void MarkAbsorbed() {
    for (size_t k = 0; k + 1 < plan_.steps.size(); ++k) {
      Step& act = plan_.steps[k];
      const Step& next = plan_.steps[k + 1];
      if (act.op != Step::Op::kLayer || next.op != Step::Op::kLayer || next.in != act.out) {
        continue;
      }
      const size_t out = static_cast<size_t>(act.out);
      act.absorbed = RulesOf(LayerOf(act).spec.kind)->elementwise_activation() &&
                     RulesOf(LayerOf(next).spec.kind)->absorbs_activation() &&
                     consumers_[out].size() == 1;
    }
  }

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

  // Offsets in the batch arena, once every boundary and consumer is known:
  // kept units, jcb and scratch first, each in a place of its own, then the
  // shared region (ShareTransientUnits, ShareInnovations).
  void LayOutBatch() {
    size_t size = 0;
    auto take = [&](size_t count) {
      const size_t at = size;
      size += Aligned(count);
      return at;
    };
    const size_t b = plan_.max_batch;
    const int num_steps = static_cast<int>(plan_.steps.size());
    for (size_t i = 0; i < plan_.boundaries.size(); ++i) {
      BoundaryPlan& bp = plan_.boundaries[i];
      const size_t n = b * bp.size;
      bp.last_consumer = consumers_[i].empty() ? num_steps : consumers_[i].back().first;
      // An absorbed reader runs inside the next step, which reads these
      // units and writes their innovations.
      const auto last = static_cast<size_t>(bp.last_consumer);
      if (last < plan_.steps.size() && plan_.steps[last].absorbed) ++bp.last_consumer;
      const bool forward_only = !bp.is_input && !consumers_[i].empty();
      auto none_reads = [&](bool variance) {
        return std::none_of(
            consumers_[i].begin(), consumers_[i].end(),
            [&](const std::pair<int, int>& c) { return BackwardReads(c.first, variance); });
      };
      bp.units_transient = forward_only && none_reads(false);
      bp.var_transient = forward_only && none_reads(true);
      if (!bp.units_transient) bp.units.mu = take(n);
      if (!bp.var_transient) bp.units.var = take(n);
      if (bp.has_jcb) bp.jcb = take(n);
    }
    for (PlannedLayer& l : plan_.layers) l.scratch = take(b * l.scratch_per_sample);
    // One region: the transient units while the forward runs, then (all
    // of them dead before the head writes the first innovations) the
    // innovations while the backward does.
    FirstFit region;
    ShareTransientUnits(size, region);
    ShareInnovations(size, region);
    plan_.delta_floats = region.size();
    plan_.batch_floats = size + plan_.delta_floats;
  }

 private:
  size_t Aligned(size_t count) const { return (count + align_ - 1) / align_ * align_; }
  const PlannedLayer& LayerOf(const Step& step) const {
    return plan_.layers[static_cast<size_t>(step.layer)];
  }

  // Whether step `step`'s backward reads its input's means (`variance`:
  // its variances).
  bool BackwardReads(int step, bool variance) const {
    const Step& s = plan_.steps[static_cast<size_t>(step)];
    if (s.op != Step::Op::kLayer) return false;  // a residual add passes innovations on
    const KindRules& rules = *RulesOf(plan_.layers[static_cast<size_t>(s.layer)].spec.kind);
    return variance ? rules.backward_reads_input() && rules.backward_reads_input_variance()
                    : rules.backward_reads_input();
  }

  // Places the transient units in `region` in forward order (first fit;
  // a boundary's units are freed after its last consumer's step, once the
  // units that step writes have their places). All are free again at the
  // end of the forward.
  void ShareTransientUnits(size_t base, FirstFit& region) {
    const size_t b = plan_.max_batch;
    const size_t num_steps = plan_.steps.size();
    std::vector<std::vector<size_t>> ends(num_steps);
    for (size_t t = 0; t < num_steps; ++t) {
      const size_t i = static_cast<size_t>(plan_.steps[t].out);
      BoundaryPlan& bp = plan_.boundaries[i];
      const size_t n = Aligned(b * bp.size);
      if (bp.units_transient) bp.units.mu = base + region.Take(n);
      if (bp.var_transient) bp.units.var = base + region.Take(n);
      plan_.transient_unit_floats += n * (size_t{bp.units_transient} + size_t{bp.var_transient});
      if (bp.units_transient || bp.var_transient) {
        ends[static_cast<size_t>(bp.last_consumer)].push_back(i);
      }
      for (size_t done : ends[t]) {
        const BoundaryPlan& d = plan_.boundaries[done];
        const size_t dn = Aligned(b * d.size);
        if (d.units_transient) region.Give(d.units.mu - base, dn);
        if (d.var_transient) region.Give(d.units.var - base, dn);
      }
    }
  }

  // Places every innovation slot in a region starting at `base`, in the
  // order the backward first writes them (first fit; a slot is freed after
  // the backward of its boundary's producer, once the slots first written
  // at that step have their places), and tells the steps where to write.
  void ShareInnovations(size_t base, FirstFit& region) {
    const size_t b = plan_.max_batch;
    const int num_steps = static_cast<int>(plan_.steps.size());
    // Backward time t = num_steps - 1 - step; the output's innovations are
    // written at t = -1, by the head.
    std::vector<std::vector<size_t>> start(static_cast<size_t>(num_steps) + 1);
    std::vector<std::vector<size_t>> end(static_cast<size_t>(num_steps) + 1);
    for (size_t i = 0; i < plan_.boundaries.size(); ++i) {
      const BoundaryPlan& bp = plan_.boundaries[i];
      if (bp.is_input) continue;
      start[static_cast<size_t>(num_steps - bp.last_consumer)].push_back(i);
      end[static_cast<size_t>(num_steps - FirstLive(bp, bp.last_consumer, num_steps))].push_back(i);
    }
    std::vector<std::vector<size_t>> places(plan_.boundaries.size());
    for (size_t t = 0; t < start.size(); ++t) {
      for (size_t i : start[t]) {
        BoundaryPlan& bp = plan_.boundaries[i];
        const size_t n = Aligned(b * bp.size);
        const size_t slots = std::max<size_t>(1, consumers_[i].size());
        plan_.delta_floats_unshared += slots * 2 * n;
        for (size_t k = 0; k < slots; ++k) {
          const size_t at = region.Take(2 * n);
          places[i].push_back(at);
          const Slot slot{base + at, base + at + n};
          if (k == 0) {
            bp.delta = slot;
          } else {
            bp.partials.push_back(slot);
          }
          if (k < consumers_[i].size()) {
            Step& step = plan_.steps[static_cast<size_t>(consumers_[i][k].first)];
            (consumers_[i][k].second == 0 ? step.in_delta : step.in2_delta) = slot;
          }
        }
      }
      for (size_t i : end[t]) {
        const size_t n = Aligned(b * plan_.boundaries[i].size);
        for (size_t at : places[i]) region.Give(at, 2 * n);
      }
    }
  }

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
  if (options.fuse_activations) planner.MarkAbsorbed();
  planner.LayOutBatch();
  return plan;
}

absl::Status CheckPlanMemory(const Plan& plan) {
  // Lives on one timeline: the forward of step s at time s, the head's
  // update at S (the number of steps), the backward of step s at 2S - s.
  struct Range {
    size_t begin, end;
    int first = 0, last = -1;  // live at these times; last < first: always
    std::string what;
  };
  std::vector<Range> ranges;
  const size_t b = plan.max_batch;
  const int num_steps = static_cast<int>(plan.steps.size());
  // Each boundary's last reader, from the steps themselves (an absorbed
  // step's reads are its absorber's), and the absorptions' own rule.
  std::vector<int> last_reader(plan.boundaries.size(), -1);
  std::vector<int> readers(plan.boundaries.size(), 0);
  for (int t = 0; t < num_steps; ++t) {
    const Step& step = plan.steps[static_cast<size_t>(t)];
    for (const int in : {step.in, step.in2}) {
      if (in < 0) continue;
      last_reader[static_cast<size_t>(in)] = step.absorbed ? t + 1 : t;
      ++readers[static_cast<size_t>(in)];
    }
  }
  for (int t = 0; t < num_steps; ++t) {
    const Step& step = plan.steps[static_cast<size_t>(t)];
    if (!step.absorbed) continue;
    if (t + 1 == num_steps || plan.steps[static_cast<size_t>(t) + 1].in != step.out ||
        readers[static_cast<size_t>(step.out)] != 1) {
      return absl::InternalError(absl::StrFormat(
          "step %d is absorbed, but the next step is not the only reader of its output", t));
    }
  }
  auto fixed = [&](size_t at, size_t n, std::string what) {
    if (n > 0) ranges.push_back({at, at + n, 0, -1, std::move(what)});
  };
  for (size_t i = 0; i < plan.boundaries.size(); ++i) {
    const BoundaryPlan& bp = plan.boundaries[i];
    const size_t n = b * bp.size;
    const int last = last_reader[i] < 0 ? num_steps : last_reader[i];
    for (const auto& [at, part, transient] :
         {std::tuple{bp.units.mu, "mu", bp.units_transient},
          std::tuple{bp.units.var, "var", bp.var_transient}}) {
      if (transient) {
        ranges.push_back({at, at + n, bp.producer, last,
                          absl::StrFormat("boundary %d units.%s (transient)", i, part)});
      } else {
        fixed(at, n, absl::StrFormat("boundary %d units.%s", i, part));
      }
    }
    if (bp.has_jcb) fixed(bp.jcb, n, absl::StrFormat("boundary %d jcb", i));
    if (bp.is_input) continue;
    std::vector<Slot> slots = {bp.delta};
    slots.insert(slots.end(), bp.partials.begin(), bp.partials.end());
    for (size_t k = 0; k < slots.size(); ++k) {
      for (const size_t at : {slots[k].mu, slots[k].var}) {
        ranges.push_back({at, at + n, 2 * num_steps - last,
                          2 * num_steps - FirstLive(bp, last, num_steps),
                          absl::StrFormat("boundary %d innovation slot %d", i, k)});
      }
    }
  }
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    fixed(plan.layers[l].scratch, b * plan.layers[l].scratch_per_sample,
          absl::StrFormat("layer %d scratch", l));
  }
  auto always = [](const Range& r) { return r.last < r.first; };
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& x = ranges[i];
    if (x.end > plan.batch_floats) {
      return absl::InternalError(absl::StrFormat("%s ends at %d, past the arena's %d floats",
                                                 x.what, x.end, plan.batch_floats));
    }
    for (size_t j = i + 1; j < ranges.size(); ++j) {
      const Range& y = ranges[j];
      if (x.end <= y.begin || y.end <= x.begin) continue;  // apart in memory
      const bool both_live = always(x) || always(y) || (x.first <= y.last && y.first <= x.last);
      if (both_live) {
        return absl::InternalError(absl::StrFormat(
            "%s [%d, %d) overlaps %s [%d, %d) while both are live", x.what, x.begin, x.end,
            y.what, y.begin, y.end));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tagi::spec
