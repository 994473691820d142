// Fuzzes job files: ParseJobSpecJson (the proto3 JSON mapping of
// tagi.v1.JobSpec, unknown fields refused) and ValidateJobSpec, the gate a
// job passes before the coordinator queues it or tagi-train runs it.
//
// Besides the sanitizers, it checks that
//   - every refusal is InvalidArgument with a message;
//   - a parsed spec prints (JobSpecToJson) to JSON that parses back to the
//     same message, as the REST gateway and tagictl rely on;
//   - a spec that validates also gives the engine an architecture
//     (ArchitectureFromJobSpec): otherwise a job would be accepted and then
//     fail on every worker.
#include <cstddef>
#include <cstdint>
#include <string>

#include "spec/hsm_tree.h"
#include "common/job_spec.h"
#include "tests/fuzz/fuzz_support.h"
#include "worker/engine/architecture.h"

namespace {

void CheckRefusal(const absl::Status& status, const char* what) {
  FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument && !status.message().empty(),
             "%s refused with %s", what, status.ToString().c_str());
}

void CheckValidSpec(const tagi::v1::JobSpec& spec) {
  auto arch = tagi::engine::ArchitectureFromJobSpec(spec);
  FUZZ_CHECK(arch.ok(), "a valid job has no architecture: %s", arch.status().ToString().c_str());
  const int in = tagi::ExpectedInputWidth(spec.data());
  FUZZ_CHECK(in == 0 || static_cast<uint32_t>(in) == arch->input_width(),
             "input width %d, architecture %s", in, arch->ToString().c_str());
  const int out = tagi::ExpectedOutputWidth(spec);
  FUZZ_CHECK(out == 0 || static_cast<uint32_t>(out) == arch->output_width(),
             "output width %d, architecture %s", out, arch->ToString().c_str());
  FUZZ_CHECK(tagi::ParseDevice(spec.device()).ok(), "valid job, bad device");
  for (uint64_t epoch : {uint64_t{0}, uint64_t{spec.epochs()} - 1}) {
    const float sigma = tagi::SigmaVAtEpoch(spec.noise(), epoch);
    FUZZ_CHECK(sigma >= spec.noise().sigma_v_min() && sigma <= spec.noise().sigma_v(),
               "sigma_v %g at epoch %llu", sigma, static_cast<unsigned long long>(epoch));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto spec = tagi::ParseJobSpecJson(json);
  if (!spec.ok()) {
    CheckRefusal(spec.status(), "ParseJobSpecJson");
    return 0;
  }
  const std::string printed = tagi::JobSpecToJson(*spec);
  auto again = tagi::ParseJobSpecJson(printed);
  FUZZ_CHECK(again.ok(), "printed spec does not parse: %s\n%s", again.status().ToString().c_str(),
             printed.c_str());
  FUZZ_CHECK(again->SerializeAsString() == spec->SerializeAsString(),
             "printed spec parses to another message:\n%s", printed.c_str());

  const absl::Status valid = tagi::ValidateJobSpec(*spec);
  if (!valid.ok()) {
    CheckRefusal(valid, "ValidateJobSpec");
    return 0;
  }
  CheckValidSpec(*spec);
  return 0;
}
