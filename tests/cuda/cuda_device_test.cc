// GPU tests: they run where a CUDA device is present and skip with the
// runtime's own reason everywhere else (CI has no GPU).
#include "gtest/gtest.h"
#include "worker/engine/cuda/device.h"

namespace tagi::engine::cuda {
namespace {

TEST(CudaDevice, ListsUsableDevicesOrSaysWhyNot) {
  const DeviceList list = ListCudaDevices();
  if (list.devices.empty()) {
    EXPECT_FALSE(list.reason.empty());
    GTEST_SKIP() << "no CUDA device: " << list.reason;
  }
  for (const DeviceInfo& d : list.devices) {
    EXPECT_FALSE(d.name.empty());
    // The build targets sm_80 and sm_90; older devices cannot run our kernels.
    EXPECT_GE(d.compute_major, 8) << d.name;
    EXPECT_GT(d.total_memory_bytes, size_t{1} << 30) << d.name;
    EXPECT_GT(d.multiprocessors, 0) << d.name;
  }
}

TEST(CudaDevice, BuildReportsWhetherCudaIsCompiledIn) {
#ifdef TAGI_EXPECT_CUDA
  EXPECT_TRUE(CudaCompiledIn());
#else
  EXPECT_FALSE(CudaCompiledIn());
  EXPECT_NE(ListCudaDevices().reason.find("no CUDA support"), std::string::npos);
#endif
}

}  // namespace
}  // namespace tagi::engine::cuda
