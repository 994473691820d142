// Built where NCCL (or nvcc) was not found: the backend reports its absence.
#include "worker/collective/nccl/nccl_collective.h"

namespace tagi {

bool NcclCompiledIn() { return false; }

absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(Store&, int, int,
                                                                 const NcclOptions&) {
  return absl::FailedPreconditionError(
      "backend NCCL: this build has no NCCL support (CUDA toolkit or nccl.h not found at "
      "configure time)");
}

}  // namespace tagi
