#include "ctl/validate.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/job_spec.h"
#include "common/json_string.h"
#include "ctl/format.h"
#include "spec/network.h"
#include "spec/plan.h"

namespace tagi {
namespace {

// A quoted JSON string (common/json_string.h: any bytes give valid JSON).
std::string Json(absl::string_view s) {
  std::string out;
  AppendJsonString(s, out);
  return out;
}

double Mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// What the CPU engine allocates for a plan, in bytes (worker/engine/model.cc
// Build): parameters and the delta arena that mirrors them (with the state
// and the control words), state, derived, the batch arena and the workspace.
// The shared region holds the transient units in the forward and the
// innovations in the backward (spec/plan.h).
struct EngineMemory {
  size_t parameters = 0, batch = 0, shared = 0, innovations_unshared = 0, workspace = 0,
         derived = 0, total = 0;
  // Of the batch arena, with their alignment: units kept for the backward,
  // jcb, layer scratch; and the transient units, counted in `shared`.
  size_t units = 0, jcb = 0, scratch = 0, transient_units = 0;
};
EngineMemory CpuEngineMemory(const spec::Plan& p) {
  EngineMemory m;
  m.parameters = (4 * p.num_parameters + 2 * p.num_state) * sizeof(float);
  m.batch = p.batch_floats * sizeof(float);
  m.shared = p.delta_floats * sizeof(float);
  m.innovations_unshared = p.delta_floats_unshared * sizeof(float);
  m.transient_units = p.transient_unit_floats * sizeof(float);
  m.workspace = p.workspace_floats * sizeof(float);
  m.derived = p.derived_floats * sizeof(float);
  m.total = m.parameters + m.batch + m.workspace + m.derived;
  m.scratch = m.batch - m.shared;
  for (const spec::BoundaryPlan& b : p.boundaries) {
    constexpr size_t kAlign = spec::kCpuAlignFloats;
    const size_t n = (p.max_batch * b.size + kAlign - 1) / kAlign * kAlign * sizeof(float);
    m.units += n * (size_t{!b.units_transient} + size_t{!b.var_transient});
    if (b.has_jcb) m.jcb += n;
  }
  m.scratch -= m.units + m.jcb;
  return m;
}

Validation Invalid(const std::string& path, const absl::Status& st) {
  Validation v;
  v.text = absl::StrFormat("%s: invalid: %s\n", Printable(path), Printable(st.message()));
  v.json = absl::StrFormat("{\"valid\": false, \"error\": %s}\n", Json(st.message()));
  return v;
}

}  // namespace

Validation ValidateJobFile(const std::string& path) {
  absl::StatusOr<tagi::v1::JobSpec> spec = LoadJobSpecFile(path);
  if (!spec.ok()) return Invalid(path, spec.status());
  if (absl::Status st = ValidateJobSpec(*spec); !st.ok()) return Invalid(path, st);
  absl::StatusOr<spec::Architecture> arch = JobArchitecture(*spec);
  if (!arch.ok()) return Invalid(path, arch.status());
  const spec::Shape out = spec::OutputShape(arch->layers, arch->input);
  absl::StatusOr<spec::Plan> plan =
      spec::MakePlan(*arch, {std::max<size_t>(spec->batch_size(), 1), spec::kCpuAlignFloats});
  if (!plan.ok()) return Invalid(path, plan.status());
  const EngineMemory m = CpuEngineMemory(*plan);
  Validation v;
  v.valid = true;
  v.text = absl::StrFormat(
      "%s: valid: %s; %d parameters, %d state values, output %s\n"
      "  memory of a training step at batch %d (CPU engine): %.1f MiB: parameters and their "
      "deltas %.1f, batch arena %.1f (units kept for the backward %.1f, jcb %.1f, layer scratch "
      "%.1f, shared by lifetime %.1f: units of the forward only %.1f and innovations %.1f "
      "unshared), workspace %.1f, derived %.1f\n",
      Printable(path), arch->ToString(), arch->num_parameters(), arch->num_state(),
      out.ToString(), plan->max_batch, Mib(m.total), Mib(m.parameters), Mib(m.batch),
      Mib(m.units), Mib(m.jcb), Mib(m.scratch), Mib(m.shared), Mib(m.transient_units),
      Mib(m.innovations_unshared), Mib(m.workspace), Mib(m.derived));
  v.json = absl::StrFormat(
      "{\"valid\": true, \"architecture\": %s, \"parameters\": %d, \"state\": %d, "
      "\"output\": [%d, %d, %d], \"memory\": {\"batch\": %d, \"totalBytes\": %d, "
      "\"parameterBytes\": %d, \"batchArenaBytes\": %d, \"keptUnitBytes\": %d, "
      "\"sharedBytes\": %d, \"transientUnitBytes\": %d, \"innovationBytesUnshared\": %d, "
      "\"workspaceBytes\": %d, \"derivedBytes\": %d}}\n",
      Json(arch->ToString()), arch->num_parameters(), arch->num_state(), out.c, out.h, out.w,
      plan->max_batch, m.total, m.parameters, m.batch, m.units, m.shared, m.transient_units,
      m.innovations_unshared, m.workspace, m.derived);
  return v;
}

}  // namespace tagi
