#include "ctl/validate.h"

#include "absl/strings/str_format.h"
#include "common/job_spec.h"
#include "ctl/format.h"
#include "spec/network.h"

namespace tagi {
namespace {

// A JSON string literal (RFC 8259) of UTF-8 text: quotes, backslashes and
// control bytes escaped.
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

Validation Invalid(const std::string& path, const absl::Status& st) {
  Validation v;
  v.text = absl::StrFormat("%s: invalid: %s\n", Printable(path), Printable(st.message()));
  // Printable first: a message may quote bytes of the file that are not
  // UTF-8, which JSON cannot carry.
  v.json = absl::StrFormat("{\"valid\": false, \"error\": %s}\n",
                           JsonString(Printable(st.message())));
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
      JsonString(arch->ToString()), arch->num_parameters(), arch->num_state(), out.c, out.h,
      out.w);
  return v;
}

}  // namespace tagi
