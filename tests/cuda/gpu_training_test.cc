// GPU training through the same Trainer the workers run: one epoch of the
// example Fashion-MNIST job on cuda:0 must reach the accuracy of the CPU
// engine on the same job (same seed, same batches; the two differ only by
// fp32 summation order), and a data-parallel pair of GPU engines over a
// host collective must train like a pair of CPU engines. Skips without a
// CUDA device or without the data set.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "worker/collective/in_process.h"
#include "worker/data/loader.h"
#include "worker/engine/cuda/device.h"
#include "worker/trainer.h"

namespace tagi {
namespace {

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";

#define SKIP_WITHOUT_GPU_OR_DATA()                                                 \
  do {                                                                             \
    const engine::cuda::DeviceList gpus = engine::cuda::ListCudaDevices();         \
    if (gpus.devices.empty()) GTEST_SKIP() << "no CUDA device: " << gpus.reason;   \
    if (!std::filesystem::exists(kFashionMnist)) {                                 \
      GTEST_SKIP() << "Fashion-MNIST is not in /usr/share/datasets/fashion-mnist"; \
    }                                                                              \
  } while (0)

tagi::v1::JobSpec ExampleJob() {
  auto spec = LoadJobSpecFile(std::string(TAGI_SOURCE_DIR) + "/examples/fmnist_fnn.json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->set_epochs(1);
  return *spec;
}

absl::StatusOr<EpochMetrics> TrainOneEpoch(const tagi::v1::JobSpec& spec,
                                           const data::LoadedData& data, int device) {
  auto model = BuildModel(spec, data, spec.batch_size(), device);
  if (!model.ok()) return model.status();
  RealClock clock;
  TrainerOptions options;
  Trainer trainer(spec, **model, data, clock, std::move(options));
  return trainer.RunEpoch(0, 0, nullptr);
}

TEST(GpuTraining, FashionMnistOneEpochReachesTheCpuAccuracy) {
  SKIP_WITHOUT_GPU_OR_DATA();
  const tagi::v1::JobSpec spec = ExampleJob();
  auto data = data::LoadData(spec.data(), spec.seed());
  ASSERT_TRUE(data.ok()) << data.status();
  auto cpu = TrainOneEpoch(spec, *data, -1);
  auto gpu = TrainOneEpoch(spec, *data, 0);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::printf("one epoch: CPU test accuracy %.4f (%.0f samples/s), GPU %.4f (%.0f samples/s)\n",
              cpu->test.accuracy, cpu->samples_per_second, gpu->test.accuracy,
              gpu->samples_per_second);
  // Thousands of steps apart from summation order (a ReLU input that
  // rounds to the other side of zero changes that step): the same quality,
  // not the same bits.
  EXPECT_GT(cpu->test.accuracy, 0.80);
  EXPECT_NEAR(gpu->test.accuracy, cpu->test.accuracy, 0.01);
  EXPECT_NEAR(gpu->train_accuracy, cpu->train_accuracy, 0.01);
  EXPECT_NEAR(gpu->test.log_likelihood, cpu->test.log_likelihood, 0.03);
}

// Two ranks as threads over the in-process collective (host memory): GPU
// engines stage their deltas through the host, and end where CPU engines do.
TEST(GpuTraining, TwoGpuRanksOverAHostCollectiveTrainLikeCpuRanks) {
  SKIP_WITHOUT_GPU_OR_DATA();
  tagi::v1::JobSpec spec = ExampleJob();
  spec.mutable_data()->set_train_limit(3200);
  spec.mutable_data()->set_test_limit(1000);
  auto data = data::LoadData(spec.data(), spec.seed());
  ASSERT_TRUE(data.ok()) << data.status();
  auto run_pair = [&](int device, std::vector<float>* params, EpochMetrics* m0) {
    InProcessGroup group(2);
    std::vector<std::thread> threads;
    std::vector<absl::Status> status(2);
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        auto model = BuildModel(spec, *data, spec.batch_size(), device);
        if (!model.ok()) {
          status[r] = model.status();
          return;
        }
        std::unique_ptr<Collective> member = group.Member(r);
        RealClock clock;
        TrainerOptions options;
        options.collective = member.get();
        Trainer trainer(spec, **model, *data, clock, std::move(options));
        auto m = trainer.RunEpoch(0, 0, nullptr);
        status[r] = m.status();
        if (m.ok() && r == 0) {
          *m0 = *m;
          params->resize(2 * (*model)->num_parameters());
          status[r] = (*model)->ReadParameters(*params);
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& st : status) EXPECT_TRUE(st.ok()) << st;
  };
  std::vector<float> cpu_params, gpu_params;
  EpochMetrics cpu_m, gpu_m;
  run_pair(-1, &cpu_params, &cpu_m);
  run_pair(0, &gpu_params, &gpu_m);
  ASSERT_FALSE(HasFailure());
  EXPECT_NEAR(gpu_m.test.accuracy, cpu_m.test.accuracy, 0.02);
  ASSERT_EQ(gpu_params.size(), cpu_params.size());
  // 100 steps apart from summation order: on average the means stay close
  // on the scale of their standard deviations (a layout or staging error
  // would put them about one standard deviation apart).
  const size_t n = cpu_params.size() / 2;
  double sum = 0.0;
  for (size_t k = 0; k < n; ++k) {
    sum += std::abs(double{gpu_params[k]} - cpu_params[k]) / std::sqrt(double{cpu_params[n + k]});
  }
  EXPECT_LT(sum / static_cast<double>(n), 0.02) << "mean difference in standard deviations";
}

}  // namespace
}  // namespace tagi
