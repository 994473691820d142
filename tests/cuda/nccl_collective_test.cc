// The NCCL backend. Its bootstrap through the store (bad arguments, a
// missing or malformed unique id) is tested everywhere; the collectives
// themselves need a GPU and skip with the runtime's reason without one.
// One GPU is enough: a world of one, and a world of two whose second rank
// never comes (NCCL itself refuses two ranks on one GPU).
#include "worker/collective/nccl/nccl_collective.h"

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/store.h"
#include "gtest/gtest.h"
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

}  // namespace
}  // namespace tagi
