// The NCCL backend with two ranks, one GPU each, in two threads of this
// process: sums and broadcasts of host and device memory (the CUDA engine's
// reduce buffer), a hung peer ending a call at its deadline, and an abort
// from another thread ending a call that waits for a peer. They need two
// CUDA devices and skip otherwise; in every build they also run on the host
// emulation of CUDA and NCCL (tests/cuda/emulation, two emulated devices).
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/store.h"
#include "gtest/gtest.h"
#include "worker/collective/nccl/nccl_collective.h"
#include "worker/engine/cuda/device.h"
#include "worker/engine/engine_factory.h"

namespace tagi {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);

// Both ranks of a world of two, formed concurrently through one store.
std::vector<std::unique_ptr<Collective>> FormPair(Store& store) {
  std::vector<std::unique_ptr<Collective>> ranks(2);
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto c = CreateNcclCollective(store, r, 2, {.device = r, .connect_timeout = kTimeout});
      status[r] = c.status();
      if (c.ok()) ranks[r] = std::move(*c);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  return ranks;
}

// Runs f(rank) on both ranks at once.
template <typename F>
void OnBoth(F f) {
  std::thread other([&] { f(1); });
  f(0);
  other.join();
}

// Two formed ranks, or a skip without two GPUs.
class NcclTwoRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NcclCompiledIn()) GTEST_SKIP() << "this build has no NCCL backend";
    const engine::cuda::DeviceList gpus = engine::cuda::ListCudaDevices();
    if (gpus.devices.size() < 2) {
      GTEST_SKIP() << "needs two CUDA devices: "
                   << (gpus.devices.empty() ? gpus.reason : std::string("found one"));
    }
    ranks_ = FormPair(store_);
    ASSERT_TRUE(ranks_[0] && ranks_[1]);
  }

  InMemoryStore store_;
  std::vector<std::unique_ptr<Collective>> ranks_;
};

TEST_F(NcclTwoRanks, SumAndBroadcastHostMemory) {
  auto& ranks = ranks_;
  std::vector<std::vector<float>> data = {{1.0f, 10.0f, -0.5f}, {2.0f, 20.0f, 0.25f}};
  std::vector<absl::Status> st(2);
  OnBoth([&](int r) { st[r] = ranks[r]->AllReduceSum(data[r], kTimeout); });
  ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0] << " / " << st[1];
  for (int r = 0; r < 2; ++r) EXPECT_EQ(data[r], (std::vector<float>{3.0f, 30.0f, -0.25f}));

  data = {{0.0f, 0.0f, 0.0f}, {7.0f, 8.0f, 9.0f}};
  OnBoth([&](int r) { st[r] = ranks[r]->Broadcast(data[r], /*root=*/1, kTimeout); });
  ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0] << " / " << st[1];
  EXPECT_EQ(data[0], (std::vector<float>{7.0f, 8.0f, 9.0f}));
  OnBoth([&](int r) { st[r] = ranks[r]->Barrier(kTimeout); });
  EXPECT_TRUE(st[0].ok() && st[1].ok()) << st[0] << " / " << st[1];
}

TEST_F(NcclTwoRanks, SumTheEnginesDeviceDeltaArenasInPlace) {
  auto& ranks = ranks_;
  engine::Architecture arch;
  arch.input = {3, 1, 1};
  arch.layers.resize(3);
  arch.layers[0].kind = tagi::v1::Layer::LINEAR;
  arch.layers[0].in = 3;
  arch.layers[0].out = 4;
  arch.layers[1].kind = tagi::v1::Layer::TANH;
  arch.layers[2].kind = tagi::v1::Layer::LINEAR;
  arch.layers[2].in = 4;
  arch.layers[2].out = 2;
  arch.head = {engine::HeadKind::kRegression, 0};
  std::vector<std::unique_ptr<engine::Engine>> gpus;
  std::vector<std::vector<float>> deltas;
  for (int r = 0; r < 2; ++r) {
    auto e = engine::CreateEngine(arch, 4, r);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE((*e)->Initialize(1, {}).ok());  // the same replica on both
    const std::vector<float> x(12, 0.5f + r), y(8, 1.0f - r);  // different batches
    ASSERT_TRUE((*e)->TrainStep(x.data(), nullptr, y.data(), 4, 1.0f).ok());
    deltas.emplace_back(2 * (*e)->num_parameters());
    ASSERT_TRUE((*e)->ReadDeltas(deltas.back()).ok());
    gpus.push_back(std::move(*e));
  }
  ASSERT_NE(deltas[0], deltas[1]);
  std::vector<absl::Status> st(2);
  std::vector<float> control(2);
  OnBoth([&](int r) {
    auto buffer = gpus[r]->BeginReduce(/*device_memory=*/true, 1.0f);
    if (!buffer.ok()) {
      st[r] = buffer.status();
      return;
    }
    st[r] = ranks[r]->AllReduceSum(*buffer, kTimeout);
    auto c = gpus[r]->EndReduce(1.0f, 1.0f);
    if (st[r].ok()) st[r] = c.status();
    if (c.ok()) control[r] = *c;
  });
  ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0] << " / " << st[1];
  EXPECT_EQ(control, (std::vector<float>{2.0f, 2.0f}));  // the control word is summed too
  std::vector<float> want(deltas[0].size());
  for (size_t k = 0; k < want.size(); ++k) want[k] = deltas[0][k] + deltas[1][k];
  // The ranks sum their deltas before the weights' var_w factor is applied
  // (var_w * (a + b) rather than var_w * a + var_w * b): equal up to
  // float rounding.
  for (int r = 0; r < 2; ++r) {
    std::vector<float> got(want.size());
    ASSERT_TRUE(gpus[r]->ReadDeltas(got).ok());
    for (size_t k = 0; k < want.size(); ++k) {
      ASSERT_NEAR(got[k], want[k], 1e-6 * std::max(1.0f, std::abs(want[k])))
          << "rank " << r << " delta " << k;
    }
  }
}

TEST_F(NcclTwoRanks, HungPeerEndsTheCallAtItsDeadlineAndTheFailureSticks) {
  auto& ranks = ranks_;
  // Rank 1 is alive but never calls.
  std::vector<float> v = {1.0f};
  const absl::Time start = absl::Now();
  const absl::Status st = ranks[0]->AllReduceSum(v, absl::Milliseconds(300));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("peer"), absl::string_view::npos) << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(ranks[0]->AllReduceSum(v, kTimeout).code(), absl::StatusCode::kAborted);
  // The survivor of the broken group fails too, and does not hang.
  const absl::Time late = absl::Now();
  EXPECT_FALSE(ranks[1]->AllReduceSum(v, absl::Seconds(2)).ok());
  EXPECT_LT(absl::Now() - late, absl::Seconds(10));
}

TEST_F(NcclTwoRanks, AbortFromAnotherThreadEndsACallWaitingForAPeer) {
  auto& ranks = ranks_;
  std::vector<float> v = {1.0f};
  const absl::Time start = absl::Now();
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ranks[0]->Abort();
  });
  const absl::Status st = ranks[0]->AllReduceSum(v, kTimeout);
  aborter.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the abort did not end the wait";
}

}  // namespace
}  // namespace tagi
