// The engine's names for the model spec (spec/network.h): an Architecture
// is a spec::Architecture, a LayerDesc a spec::LayerSpec, and LayerKind the
// proto's enumeration. One definition of each layer kind's rules, shared
// with the coordinator, tagictl and job validation.
#ifndef TAGI_WORKER_ENGINE_ARCHITECTURE_H_
#define TAGI_WORKER_ENGINE_ARCHITECTURE_H_

#include "absl/status/statusor.h"
#include "spec/network.h"
#include "tagi/v1/job.pb.h"

namespace tagi::engine {

using spec::Architecture;
using spec::HeadKind;
using spec::LayerKind;
using spec::Shape;
using spec::ValidateArchitecture;
using HeadDesc = spec::HeadSpec;
using LayerDesc = spec::LayerSpec;

// The network of a job (common/job_spec.h's JobArchitecture).
absl::StatusOr<Architecture> ArchitectureFromJobSpec(const tagi::v1::JobSpec& spec);

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_ARCHITECTURE_H_
