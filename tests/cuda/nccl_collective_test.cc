// The NCCL backend. Its bootstrap through the store (bad arguments, a
// missing or malformed unique id) is tested everywhere; the collectives
// themselves need a GPU and skip with the runtime's reason without one.
// One GPU is enough: a world of one, and a world of two whose second rank
// never comes (NCCL itself refuses two ranks on one GPU).
#include "worker/collective/nccl/nccl_collective.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/store.h"
#include "common/rng.h"
#include "gtest/gtest.h"
#include "worker/collective/nccl/wire_kernels.h"
#include "worker/collective/wire_precision.h"
#include "worker/engine/cuda/device.h"
#include "worker/engine/engine_factory.h"

namespace tagi {
namespace {

#define SKIP_WITHOUT_GPU()                                                       \
  do {                                                                           \
    if (!NcclCompiledIn()) GTEST_SKIP() << "this build has no NCCL backend";     \
    const engine::cuda::DeviceList gpus = engine::cuda::ListCudaDevices();       \
    if (gpus.devices.empty()) GTEST_SKIP() << "no CUDA device: " << gpus.reason; \
  } while (0)

TEST(NcclCollective, BuildReportsWhetherNcclIsCompiledIn) {
#ifdef TAGI_EXPECT_NCCL
  EXPECT_TRUE(NcclCompiledIn());
#else
  InMemoryStore store;
  auto c = CreateNcclCollective(store, 0, 1, {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("no NCCL support"), absl::string_view::npos);
#endif
}

TEST(NcclCollective, RefusesBadArguments) {
  if (!NcclCompiledIn()) GTEST_SKIP() << "this build has no NCCL backend";
  InMemoryStore store;
  EXPECT_EQ(CreateNcclCollective(store, 2, 2, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateNcclCollective(store, 0, 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateNcclCollective(store, 0, 1, {.device = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      CreateNcclCollective(store, 0, 1, {.device = 0, .connect_timeout = absl::ZeroDuration()})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(NcclCollective, RankWaitsForTheUniqueIdUntilItsDeadline) {
  if (!NcclCompiledIn()) GTEST_SKIP() << "this build has no NCCL backend";
  InMemoryStore store;
  const absl::Time start = absl::Now();
  auto c =
      CreateNcclCollective(store, 1, 2, {.device = 0, .connect_timeout = absl::Milliseconds(200)});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_NE(c.status().message().find("unique id"), absl::string_view::npos) << c.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(NcclCollective, RefusesAMalformedUniqueId) {
  if (!NcclCompiledIn()) GTEST_SKIP() << "this build has no NCCL backend";
  InMemoryStore store;
  ASSERT_TRUE(store.Set(kNcclUniqueIdKey, "not an id").ok());
  auto c = CreateNcclCollective(store, 1, 2, {.device = 0, .connect_timeout = absl::Seconds(1)});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss) << c.status();
}

TEST(NcclCollective, WorldOfOnePublishesItsIdAndReducesHostAndDeviceMemory) {
  SKIP_WITHOUT_GPU();
  InMemoryStore store;
  auto c = CreateNcclCollective(store, 0, 1, {.device = 0, .connect_timeout = absl::Seconds(30)});
  ASSERT_TRUE(c.ok()) << c.status();
  auto id = store.Get(kNcclUniqueIdKey, absl::ZeroDuration());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), 128u);
  EXPECT_TRUE((*c)->AcceptsDeviceMemory());

  std::vector<float> host = {1.0f, -2.5f, 3.0f};
  ASSERT_TRUE((*c)->AllReduceSum(host, absl::Seconds(30)).ok());
  EXPECT_EQ(host, (std::vector<float>{1.0f, -2.5f, 3.0f}));
  ASSERT_TRUE((*c)->Broadcast(host, 0, absl::Seconds(30)).ok());
  EXPECT_EQ(host, (std::vector<float>{1.0f, -2.5f, 3.0f}));
  ASSERT_TRUE((*c)->Barrier(absl::Seconds(30)).ok());

  // Device memory: the CUDA engine's reduce buffer, reduced in place.
  engine::Architecture arch;
  arch.input = {3, 1, 1};
  arch.layers.resize(1);
  arch.layers[0].kind = tagi::v1::Layer::LINEAR;
  arch.layers[0].in = 3;
  arch.layers[0].out = 2;
  arch.head = {engine::HeadKind::kRegression, 0};
  auto gpu = engine::CreateEngine(arch, 4, 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE((*gpu)->Initialize(1, {}).ok());
  const std::vector<float> x(12, 0.5f), y(8, 1.0f);
  ASSERT_TRUE((*gpu)->TrainStep(x.data(), nullptr, y.data(), 4, 1.0f).ok());
  std::vector<float> before(2 * (*gpu)->num_parameters()), after(before.size());
  ASSERT_TRUE((*gpu)->ReadDeltas(before).ok());
  auto buffer = (*gpu)->BeginReduce(true, 1.0f);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  ASSERT_TRUE((*c)->AllReduceSum(*buffer, absl::Seconds(30)).ok());
  auto control = (*gpu)->EndReduce(1.0f, 1.0f);
  ASSERT_TRUE(control.ok()) << control.status();
  EXPECT_EQ(*control, 1.0f);
  ASSERT_TRUE((*gpu)->ReadDeltas(after).ok());
  EXPECT_EQ(after, before);
}

TEST(NcclCollective, AbortMakesTheNextCallFailAndSticks) {
  SKIP_WITHOUT_GPU();
  InMemoryStore store;
  auto c = CreateNcclCollective(store, 0, 1, {.device = 0, .connect_timeout = absl::Seconds(30)});
  ASSERT_TRUE(c.ok()) << c.status();
  std::thread aborter([&] { (*c)->Abort(); });
  aborter.join();
  std::vector<float> v = {1.0f};
  EXPECT_EQ((*c)->AllReduceSum(v, absl::Seconds(5)).code(), absl::StatusCode::kAborted);
  EXPECT_EQ((*c)->Barrier(absl::Seconds(5)).code(), absl::StatusCode::kAborted);
}

TEST(NcclCollective, MissingPeerEndsCreationAtTheDeadline) {
  SKIP_WITHOUT_GPU();
  InMemoryStore store;
  const absl::Time start = absl::Now();
  auto c = CreateNcclCollective(store, 0, 2, {.device = 0, .connect_timeout = absl::Seconds(3)});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded) << c.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "ncclCommAbort did not return promptly";
}

// Device memory for a test: freed at the end of the scope.
template <typename T>
struct DeviceArray {
  explicit DeviceArray(size_t n) : n(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)), cudaSuccess);
  }
  ~DeviceArray() { (void)cudaFree(p); }
  std::vector<T> Read() const {
    std::vector<T> out(n);
    EXPECT_EQ(cudaMemcpyAsync(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    return out;
  }
  void Write(const std::vector<T>& in) {
    EXPECT_EQ(cudaMemcpyAsync(p, in.data(), n * sizeof(T), cudaMemcpyHostToDevice, nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  }
  T* p = nullptr;
  size_t n;
};

bool IsNanCode(WirePrecision wire, uint16_t code) {
  return wire == WirePrecision::kBf16 ? ((code & 0x7f80u) == 0x7f80u && (code & 0x7fu) != 0)
                                      : ((code & 0x7c00u) == 0x7c00u && (code & 0x3ffu) != 0);
}

// The device's 16-bit codes (wire_kernels.cu) are the host's (NarrowTo16,
// WidenFrom16) bit for bit: every FP16 and BF16 code widened, and floats
// narrowed across the whole range with the cases that decide rounding
// (ties to even, the largest finite FP16 and the first that overflows,
// FP16 subnormals and the step from them to the normals, NaN, infinities).
TEST(NcclWire, DeviceCodesAreTheHostsBitForBit) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.5f, 65504.0f, 65519.99f, 65520.0f,
                               -65520.0f, 1e10f, 5.96e-8f, 2.98e-8f, 8.9e-8f, 6.1e-5f,
                               6.09e-5f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                               1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1e-40f, 3.4e38f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  Rng rng(5);
  for (int i = 0; i < 20000; ++i) {
    const double magnitude = std::ldexp(rng.Uniform(), static_cast<int>(rng.Below(80)) - 40);
    values.push_back(static_cast<float>(rng.Uniform() < 0.5 ? -magnitude : magnitude));
  }
  const size_t n = values.size();
  DeviceArray<float> in(n), out(n);
  DeviceArray<uint16_t> codes(n);
  in.Write(values);
  for (const WirePrecision wire : {WirePrecision::kBf16, WirePrecision::kFp16}) {
    const bool bf16 = wire == WirePrecision::kBf16;
    for (const float scale : {1.0f, 0.25f, 1024.0f}) {
      ASSERT_EQ(nccl_wire::Narrow(bf16, in.p, scale, codes.p, n, nullptr), cudaSuccess);
      const std::vector<uint16_t> got = codes.Read();
      std::vector<uint16_t> want(n);
      NarrowTo16(wire, values.data(), scale, want.data(), n);
      for (size_t i = 0; i < n; ++i) {
        if (IsNanCode(wire, want[i])) {
          EXPECT_TRUE(IsNanCode(wire, got[i])) << values[i];
        } else {
          ASSERT_EQ(got[i], want[i]) << WirePrecisionName(wire) << " of " << values[i]
                                     << " times " << scale;
        }
      }
    }
    std::vector<uint16_t> all(65536);
    for (size_t c = 0; c < all.size(); ++c) all[c] = static_cast<uint16_t>(c);
    DeviceArray<uint16_t> every(all.size());
    DeviceArray<float> widened(all.size());
    every.Write(all);
    ASSERT_EQ(nccl_wire::Widen(bf16, every.p, 0.5f, widened.p, all.size(), nullptr), cudaSuccess);
    const std::vector<float> got = widened.Read();
    std::vector<float> want(all.size());
    WidenFrom16(wire, all.data(), 0.5f, want.data(), all.size());
    for (size_t c = 0; c < all.size(); ++c) {
      if (std::isnan(want[c])) {
        EXPECT_TRUE(std::isnan(got[c])) << c;
      } else {
        ASSERT_EQ(std::memcmp(&got[c], &want[c], sizeof(float)), 0)
            << WirePrecisionName(wire) << " code " << c << ": " << got[c] << " vs " << want[c];
      }
    }
  }
  // The largest magnitude, by partials: a NaN anywhere stays.
  DeviceArray<float> partials(nccl_wire::kPartials);
  values[22] = -7e30f;  // no NaN
  in.Write(values);
  ASSERT_EQ(nccl_wire::MaxAbsPartials(in.p, n, partials.p, nullptr), cudaSuccess);
  float most = 0.0f;
  for (const float p : partials.Read()) most = std::max(most, p);
  EXPECT_EQ(most, std::numeric_limits<float>::infinity());
  values[20] = values[21] = 1.0f;  // the infinities go
  in.Write(values);
  ASSERT_EQ(nccl_wire::MaxAbsPartials(in.p, n, partials.p, nullptr), cudaSuccess);
  most = 0.0f;
  for (const float p : partials.Read()) most = std::max(most, p);
  EXPECT_EQ(most, 3.4e38f);
  values[7000] = std::numeric_limits<float>::quiet_NaN();
  in.Write(values);
  ASSERT_EQ(nccl_wire::MaxAbsPartials(in.p, n, partials.p, nullptr), cudaSuccess);
  bool nan = false;
  for (const float p : partials.Read()) nan = nan || std::isnan(p);
  EXPECT_TRUE(nan);
}

}  // namespace
}  // namespace tagi
