// CreateEngine: the engine of a device, in every build.
//
// device < 0 is the CPU (CpuEngine); device N >= 0 is the GPU cuda:N
// (cuda::CudaEngine). In a build without CUDA, or on a host where cuda:N
// does not exist or cannot run, asking for a GPU is FailedPrecondition with
// a message that says why. The engine is not initialised (see
// Engine::Initialize). Thread-safe.
#ifndef TAGI_WORKER_ENGINE_ENGINE_FACTORY_H_
#define TAGI_WORKER_ENGINE_ENGINE_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/engine.h"

namespace tagi::engine {

absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(const Architecture& arch, size_t max_batch,
                                                     int device);

// Whether this build can create GPU engines at all.
bool GpuEnginesCompiledIn();

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_ENGINE_FACTORY_H_
