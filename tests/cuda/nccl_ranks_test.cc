// The NCCL backend with two ranks, one GPU each, in two threads of this
// process: sums and broadcasts of host and device memory (the CUDA engine's
// reduce buffer), a hung peer ending a call at its deadline, an abort
// from another thread ending a call that waits for a peer, and the step's
// all-reduce in buckets that NCCL's stream takes as the backward finishes
// them (device events, no host wait). They need two
// CUDA devices and skip otherwise; in every build they also run on the host
// emulation of CUDA and NCCL (tests/cuda/emulation, two emulated devices).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/job_spec.h"
#include "common/rng.h"
#include "common/store.h"
#include "gtest/gtest.h"
#include "tests/collective/random_split.h"
#include "worker/collective/nccl/nccl_collective.h"
#include "worker/collective/wire_precision.h"
#include "worker/engine/cuda/device.h"
#include "worker/engine/engine_factory.h"
#include "worker/trainer.h"

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

// A 3-4-TANH-2 regression network.
engine::Architecture TinyArchitecture() {
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
  return arch;
}

TEST_F(NcclTwoRanks, SumTheEnginesDeviceDeltaArenasInPlace) {
  auto& ranks = ranks_;
  const engine::Architecture arch = TinyArchitecture();
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

// The backward hands out each layer's final deltas with an event; each
// range goes to NCCL at once, its stream waiting for the event on the
// device, with no host wait anywhere: the sums are the ranks' deltas. (On
// the emulated GPU, queued work runs only when something waits for it: an
// all-reduce that did not wait for the event would sum the deltas an
// earlier batch left in the arena.)
TEST_F(NcclTwoRanks, SumTheDeltasAsTheBackwardHandsThemOut) {
  auto& ranks = ranks_;
  const engine::Architecture arch = TinyArchitecture();
  struct HandOut {
    size_t ready_from;
    void* event;
  };
  std::vector<std::unique_ptr<engine::Engine>> gpus;
  std::vector<std::vector<float>> deltas;
  std::vector<std::vector<HandOut>> handouts(2);
  std::vector<engine::Engine::ReduceBuffer> buffers(2);
  for (int r = 0; r < 2; ++r) {
    auto e = engine::CreateEngine(arch, 4, r);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE((*e)->Initialize(1, {}).ok());
    const std::vector<float> x(12, 0.5f + r), y(8, 1.0f - r);
    ASSERT_TRUE((*e)->TrainStep(x.data(), nullptr, y.data(), 4, 1.0f).ok());
    deltas.emplace_back(2 * (*e)->num_parameters());
    ASSERT_TRUE((*e)->ReadDeltas(deltas.back()).ok());
    // Another batch's deltas fill the arena (ReadDeltas waits for them).
    const std::vector<float> x2(12, -2.0f), y2(8, 5.0f);
    ASSERT_TRUE((*e)->TrainStep(x2.data(), nullptr, y2.data(), 4, 1.0f).ok());
    std::vector<float> other(deltas.back().size());
    ASSERT_TRUE((*e)->ReadDeltas(other).ok());
    ASSERT_NE(other, deltas.back());
    auto buffer = (*e)->SetBackwardObserver(
        [&handouts, r](size_t ready_from, void* event) {
          handouts[r].push_back({ready_from, event});
        },
        /*device_memory=*/true);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    buffers[r] = *buffer;
    // The first batch again: the backward only queues its work.
    ASSERT_TRUE((*e)->TrainStep(x.data(), nullptr, y.data(), 4, 1.0f).ok());
    ASSERT_GE(handouts[r].size(), 2u) << "one hand-out per layer with parameters";
    EXPECT_EQ(handouts[r].back().ready_from, 0u);
    gpus.push_back(std::move(*e));
  }
  const size_t n = gpus[0]->num_parameters();
  std::vector<absl::Status> st(2);
  OnBoth([&](int r) {
    size_t end = n;
    for (const HandOut& h : handouts[r]) {
      ASSERT_NE(h.event, nullptr);
      ASSERT_LT(h.ready_from, end);
      const size_t count = end - h.ready_from;
      const std::span<float> values = buffers[r].values;
      for (const size_t at : {h.ready_from, buffers[r].var_offset + h.ready_from}) {
        st[r] = ranks[r]->AllReduceSumAfter(values.subspan(at, count), h.event, WirePrecision::kFp32, kTimeout);
        if (!st[r].ok()) return;
      }
      end = h.ready_from;
    }
  });
  ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0] << " / " << st[1];
  for (int r = 0; r < 2; ++r) {
    std::vector<float> got(deltas[0].size());
    ASSERT_TRUE(gpus[r]->ReadDeltas(got).ok());
    for (size_t k = 0; k < got.size(); ++k) {
      const float want = deltas[0][k] + deltas[1][k];
      ASSERT_NEAR(got[k], want, 1e-6 * std::max(1.0f, std::abs(want)))
          << "rank " << r << " delta " << k;
    }
  }
  // A host span cannot wait for a device event; the collective stays usable.
  std::vector<float> host = {1.0f};
  EXPECT_EQ(ranks[0]->AllReduceSumAfter(host, handouts[0][0].event, WirePrecision::kFp32, kTimeout).code(),
            absl::StatusCode::kInvalidArgument);
}

constexpr uint32_t kInputs = 16;
constexpr uint32_t kClasses = 10;

// 16-32-RELU-32-RELU-hsm(10), batch 8 per rank, on random data whose label
// is the largest of the first ten inputs.
tagi::v1::JobSpec SmallJob(uint32_t bucket_kib) {
  tagi::v1::JobSpec spec;
  uint32_t in = kInputs;
  for (int i = 0; i < 2; ++i) {
    auto* linear = spec.add_layers()->mutable_linear();
    linear->set_in_features(in);
    linear->set_out_features(32);
    spec.add_layers()->mutable_relu();
    in = 32;
  }
  spec.mutable_head()->mutable_classification()->set_num_classes(kClasses);
  auto* last = spec.add_layers()->mutable_linear();
  last->set_in_features(in);
  last->set_out_features(static_cast<uint32_t>(ExpectedOutputWidth(spec)));
  spec.mutable_noise()->set_sigma_v(1.0f);
  spec.set_batch_size(8);
  spec.set_epochs(1);
  spec.set_seed(7);
  spec.set_bucket_kib(bucket_kib);
  return spec;
}

// Random inputs in [-1, 1]; the label is the largest of the first ten
// features, so there is something to learn.
data::Dataset RandomSplit(size_t n, uint64_t seed) {
  return testing_data::RandomSplit(n, kInputs, kClasses, seed);
}

struct PairRun {
  std::vector<uint64_t> fingerprints;  // per rank, after the steps
  size_t buckets = 0;                  // rank 0's last step
};

// `steps` data-parallel steps of `spec` on the two ranks.
PairRun TrainPair(std::vector<std::unique_ptr<Collective>>& ranks, const tagi::v1::JobSpec& spec,
                  const data::LoadedData& data, size_t steps) {
  PairRun run;
  run.fingerprints.resize(2);
  std::vector<absl::Status> st(2);
  OnBoth([&](int r) {
    auto model = BuildModel(spec, data, spec.batch_size(), r);
    if (!model.ok()) {
      st[r] = model.status();
      return;
    }
    RealClock clock;
    TrainerOptions options;
    options.collective = ranks[r].get();
    options.collective_timeout = kTimeout;
    Trainer trainer(spec, **model, data, clock, std::move(options));
    for (size_t s = 0; s < steps && st[r].ok(); ++s) st[r] = trainer.Step(0, s);
    if (!st[r].ok()) return;
    if (r == 0) run.buckets = trainer.last_step().buckets;
    auto fp = (*model)->ParameterFingerprint();
    st[r] = fp.status();
    if (fp.ok()) run.fingerprints[r] = *fp;
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  return run;
}

data::LoadedData SmallData() {
  data::LoadedData data;
  data.data.train = RandomSplit(160, 1);
  data.data.test = RandomSplit(32, 2);
  return data;
}

// Trained with 1 KiB buckets, each reduced by NCCL as the backward finishes
// it, and with one all-reduce after the backward: the same bits on both
// replicas and in both runs (NCCL sums each element over the ranks alike,
// whatever the call it is in).
TEST_F(NcclTwoRanks, BucketedStepsOnTheDeviceGiveTheOneAllReducesBits) {
  const data::LoadedData data = SmallData();
  constexpr size_t kSteps = 6;
  const PairRun bucketed = TrainPair(ranks_, SmallJob(1), data, kSteps);
  ASSERT_FALSE(HasFailure());
  EXPECT_GT(bucketed.buckets, 4u) << "the 1 KiB buckets did not go separately";
  EXPECT_EQ(bucketed.fingerprints[0], bucketed.fingerprints[1]);
  const PairRun whole = TrainPair(ranks_, SmallJob(1 << 20), data, kSteps);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(whole.buckets, 1u);
  EXPECT_EQ(whole.fingerprints[0], whole.fingerprints[1]);
  EXPECT_EQ(bucketed.fingerprints[0], whole.fingerprints[0]);
}

// Rank 1 never steps: rank 0's first bucket waits for it on the device
// until another thread aborts the collective. The step fails (Aborted), in
// time, and nothing of it is applied.
TEST_F(NcclTwoRanks, AnAbortMidBucketFailsTheStepAndAppliesNothing) {
  const data::LoadedData data = SmallData();
  const tagi::v1::JobSpec spec = SmallJob(1);
  auto model = BuildModel(spec, data, spec.batch_size(), 0);
  ASSERT_TRUE(model.ok()) << model.status();
  auto before = (*model)->ParameterFingerprint();
  ASSERT_TRUE(before.ok());
  RealClock clock;
  TrainerOptions options;
  options.collective = ranks_[0].get();
  options.collective_timeout = kTimeout;
  Trainer trainer(spec, **model, data, clock, std::move(options));
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    ranks_[0]->Abort();
  });
  const absl::Time start = absl::Now();
  const absl::Status st = trainer.Step(0, 0);
  aborter.join();
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(absl::IsAborted(st)) << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "the abort did not end the step";
  auto after = (*model)->ParameterFingerprint();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);
}

// The largest magnitude of `v` (NaN-free).
float MaxAbs(const std::vector<float>& v) {
  float most = 0.0f;
  for (const float x : v) most = std::max(most, std::abs(x));
  return most;
}

// What a 16-bit sum of two ranks gives: each rank's values narrowed (FP16
// times the agreed scale), the sum of the two codes' values rounded to 16
// bits, widened. The emulated NCCL sums so; real NCCL may round its hops
// otherwise, so on a GPU the test asks for the ranks' agreement and 16-bit
// accuracy only.
std::vector<float> SumThrough16(WirePrecision wire, const std::vector<float>& a,
                                const std::vector<float>& b) {
  const size_t n = a.size();
  const float scale =
      wire == WirePrecision::kFp16 ? Fp16Scale(MaxAbs(a) + MaxAbs(b)) : 1.0f;
  std::vector<uint16_t> ca(n), cb(n), sum(n);
  NarrowTo16(wire, a.data(), scale, ca.data(), n);
  NarrowTo16(wire, b.data(), scale, cb.data(), n);
  std::vector<float> acc(n, 0.0f);
  WidenAddFrom16(wire, ca.data(), 1.0f, acc.data(), n);
  WidenAddFrom16(wire, cb.data(), 1.0f, acc.data(), n);
  NarrowTo16(wire, acc.data(), 1.0f, sum.data(), n);
  std::vector<float> out(n);
  WidenFrom16(wire, sum.data(), 1.0f / scale, out.data(), n);
  return out;
}

// Device memory on the calling thread's GPU.
struct DeviceFloats {
  explicit DeviceFloats(size_t n) : n(n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)), cudaSuccess);
  }
  ~DeviceFloats() { (void)cudaFree(p); }
  void Copy(float* dst, const float* src, cudaMemcpyKind kind) const {
    EXPECT_EQ(cudaMemcpyAsync(dst, src, n * sizeof(float), kind, nullptr), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  }
  float* p = nullptr;
  size_t n;
};

// BF16 and FP16 sums of device memory: the same bits on both ranks, each
// value the 16-bit rounding of the sum; a NaN on one rank makes FP16 fall
// back to FP32 for that call on both (the NaN arrives, the rest is exact).
TEST_F(NcclTwoRanks, SixteenBitWiresSumDeviceMemoryAlikeOnBothRanks) {
  auto& ranks = ranks_;
  constexpr size_t kCount = 3000;
  std::vector<std::vector<float>> data(2, std::vector<float>(kCount));
  Rng rng(11);
  for (auto& v : data) {
    for (float& x : v) x = static_cast<float>(std::ldexp(rng.Normal(), -static_cast<int>(rng.Below(12))));
  }
  for (const WirePrecision wire : {WirePrecision::kBf16, WirePrecision::kFp16}) {
    for (const bool with_nan : {false, true}) {
      if (with_nan && wire == WirePrecision::kBf16) continue;
      std::vector<std::vector<float>> in = data;
      if (with_nan) in[1][17] = std::numeric_limits<float>::quiet_NaN();
      std::vector<std::vector<float>> got(2, std::vector<float>(kCount));
      std::vector<absl::Status> st(2);
      OnBoth([&](int r) {
        ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
        DeviceFloats d(kCount);
        d.Copy(d.p, in[r].data(), cudaMemcpyHostToDevice);
        st[r] = ranks[r]->AllReduceSumOnWire({d.p, kCount}, wire, kTimeout);
        d.Copy(got[r].data(), d.p, cudaMemcpyDeviceToHost);
      });
      ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0] << " / " << st[1];
      ASSERT_EQ(std::memcmp(got[0].data(), got[1].data(), kCount * sizeof(float)), 0)
          << WirePrecisionName(wire) << ": the replicas differ";
      if (with_nan) {
        EXPECT_TRUE(std::isnan(got[0][17]));
        for (size_t i = 0; i < kCount; ++i) {
          if (i != 17) ASSERT_EQ(got[0][i], in[0][i] + in[1][i]) << i;
        }
        continue;
      }
      const std::vector<float> want = SumThrough16(wire, in[0], in[1]);
      const double tolerance = wire == WirePrecision::kBf16 ? 1.0 / 64 : 1.0 / 512;
      for (size_t i = 0; i < kCount; ++i) {
        const float exact = in[0][i] + in[1][i];
#if defined(TAGI_CUDA_HOST_EMULATION)
        ASSERT_EQ(got[0][i], want[i]) << WirePrecisionName(wire) << " value " << i;
#endif
        ASSERT_NEAR(got[0][i], exact, tolerance * (std::abs(in[0][i]) + std::abs(in[1][i])) + 1e-6)
            << WirePrecisionName(wire) << " value " << i;
      }
    }
  }
}

// Bucketed training with FP16 and BF16 on the wire, each bucket's NCCL call
// after its device event: both replicas keep the same bits.
TEST_F(NcclTwoRanks, SixteenBitBucketedStepsKeepTheReplicasIdentical) {
  const data::LoadedData data = SmallData();
  for (const auto wire : {tagi::v1::JobSpec::FP16, tagi::v1::JobSpec::BF16}) {
    tagi::v1::JobSpec spec = SmallJob(1);
    spec.set_wire_precision(wire);
    const PairRun run = TrainPair(ranks_, spec, data, 4);
    ASSERT_FALSE(HasFailure()) << tagi::v1::JobSpec::WirePrecision_Name(wire);
    EXPECT_GT(run.buckets, 4u);
    EXPECT_EQ(run.fingerprints[0], run.fingerprints[1])
        << tagi::v1::JobSpec::WirePrecision_Name(wire);
  }
}

}  // namespace
}  // namespace tagi
