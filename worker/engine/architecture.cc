#include "worker/engine/architecture.h"

#include "common/job_spec.h"

namespace tagi::engine {

absl::StatusOr<Architecture> ArchitectureFromJobSpec(const tagi::v1::JobSpec& spec) {
  return JobArchitecture(spec);
}

}  // namespace tagi::engine
