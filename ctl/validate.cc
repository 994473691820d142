#include "ctl/validate.h"

#include "absl/strings/str_format.h"
#include "common/job_spec.h"
#include "common/json_string.h"
#include "ctl/format.h"
#include "spec/network.h"

namespace tagi {
namespace {

// A quoted JSON string (common/json_string.h: any bytes give valid JSON).
std::string Json(absl::string_view s) {
  std::string out;
  AppendJsonString(s, out);
  return out;
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
  Validation v;
  v.valid = true;
  v.text = absl::StrFormat("%s: valid: %s; %d parameters, %d state values, output %s\n",
                           Printable(path), arch->ToString(), arch->num_parameters(),
                           arch->num_state(), out.ToString());
  v.json = absl::StrFormat(
      "{\"valid\": true, \"architecture\": %s, \"parameters\": %d, \"state\": %d, "
      "\"output\": [%d, %d, %d]}\n",
      Json(arch->ToString()), arch->num_parameters(), arch->num_state(), out.c, out.h,
      out.w);
  return v;
}

}  // namespace tagi
