// GPU jobs through the whole service (labels gpu and integration): a real
// coordinator and tagi-worker --device cuda:0 processes on loopback.
//  - world 1 with the NCCL backend: rank 0 makes the NCCL unique id and
//    puts it into the coordinator's store, the communicator forms from it,
//    and every step all-reduces the device delta arena through NCCL;
//  - world 2 on one shared GPU with the TCP ring backend: both GPU engines
//    stage their deltas through host memory (NCCL refuses two ranks on one
//    GPU), and the job ends with the accuracy of the same job on CPUs.
// Skip with the runtime's reason where no CUDA device is present.
#include <string>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/service/service_cluster.h"
#include "worker/engine/cuda/device.h"

namespace tagi::testing {
namespace {

#define SKIP_WITHOUT_GPU_OR_DATA()                                                 \
  do {                                                                             \
    const engine::cuda::DeviceList gpus = engine::cuda::ListCudaDevices();         \
    if (gpus.devices.empty()) GTEST_SKIP() << "no CUDA device: " << gpus.reason;   \
    if (!HaveFashionMnist()) {                                                     \
      GTEST_SKIP() << "Fashion-MNIST is not in /usr/share/datasets/fashion-mnist"; \
    }                                                                              \
  } while (0)

bool Terminal(const tagi::v1::Job& j) {
  return j.state() == tagi::v1::SUCCEEDED || j.state() == tagi::v1::FAILED ||
         j.state() == tagi::v1::CANCELLED;
}

double LastTestAccuracy(const tagi::v1::Job& j) {
  const auto& epochs = j.progress().epochs();
  return epochs.empty() ? -1.0 : epochs[epochs.size() - 1].test_accuracy();
}

// The Fashion-MNIST job of the fixture on cuda:0 with `backend`.
std::string GpuJob(const FmnistJob& job, const std::string& backend) {
  return absl::StrReplaceAll(
      FmnistJobJson(job),
      {{"\"device\": \"cpu\"", "\"device\": \"cuda:0\", \"backend\": \"" + backend + "\""}});
}

class ServiceGpu : public ServiceTest {
 protected:
  // Runs `json` to its end on the started cluster; the finished job.
  std::optional<tagi::v1::Job> Run(const std::string& name, const std::string& json) {
    const std::string id = Submit(WriteJob(name, json));
    if (id.empty()) return std::nullopt;
    return WaitForJob(id, Terminal, absl::Seconds(300));
  }
};

TEST_F(ServiceGpu, NcclWorldOfOneTrainsThroughTheCoordinatorsStore) {
  SKIP_WITHOUT_GPU_OR_DATA();
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  StartWorker({"--device", "cuda:0"});
  ASSERT_TRUE(WaitForWorkers(1, "IDLE", absl::Seconds(20)));
  const FmnistJob spec{.name = "gpu-nccl", .world = 1, .epochs = 1};
  const auto job = Run("nccl", GpuJob(spec, "NCCL"));
  ASSERT_TRUE(job.has_value());
  ASSERT_EQ(job->state(), tagi::v1::SUCCEEDED) << job->reason();
  EXPECT_GT(LastTestAccuracy(*job), 0.6);
}

TEST_F(ServiceGpu, TwoWorkersShareOneGpuOverTheRingAndMatchCpuWorkers) {
  SKIP_WITHOUT_GPU_OR_DATA();
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  StartWorker({"--device", "cuda:0"});
  StartWorker({"--device", "cuda:0"});
  ASSERT_TRUE(WaitForWorkers(2, "IDLE", absl::Seconds(20)));
  const FmnistJob spec{.name = "gpu-ring", .world = 2, .epochs = 1};
  const auto gpu = Run("ring", GpuJob(spec, "TCP_RING"));
  ASSERT_TRUE(gpu.has_value());
  ASSERT_EQ(gpu->state(), tagi::v1::SUCCEEDED) << gpu->reason();

  // The same job with device "cpu": the same workers run it on their CPU
  // engines (a GPU worker runs the CPU engine for "cpu" jobs).
  FmnistJob cpu_spec = spec;
  cpu_spec.name = "cpu-ring";
  const auto cpu = Run("cpu", FmnistJobJson(cpu_spec));
  ASSERT_TRUE(cpu.has_value());
  ASSERT_EQ(cpu->state(), tagi::v1::SUCCEEDED) << cpu->reason();
  EXPECT_NEAR(LastTestAccuracy(*gpu), LastTestAccuracy(*cpu), 0.02);
}

}  // namespace
}  // namespace tagi::testing
