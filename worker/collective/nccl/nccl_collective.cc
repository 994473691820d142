#include "worker/collective/nccl/nccl_collective.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "worker/collective/nccl/wire_kernels.h"
#include "worker/collective/wire_precision.h"
#include "worker/cuda_runtime/cuda_status.h"

namespace tagi {
namespace {

// How long the destructor lets ncclCommFinalize flush before aborting.
constexpr absl::Duration kFinalizeTimeout = absl::Seconds(5);
// Polling: spin this many rounds (a step's all-reduce often finishes within
// microseconds of the call), then sleep this long between polls.
constexpr int kSpinPolls = 200;
constexpr absl::Duration kPollSleep = absl::Microseconds(50);

absl::Status NcclError(ncclResult_t rc, ncclComm_t comm, const char* what) {
  std::string msg = absl::StrFormat("nccl backend: %s: %s", what, ncclGetErrorString(rc));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&msg, " (", last, ")");
  switch (rc) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(msg);
    case ncclUnhandledCudaError:
    case ncclInternalError:
      return absl::InternalError(msg);
    default:  // ncclSystemError, ncclRemoteError: the group is broken
      return absl::AbortedError(msg);
  }
}

bool IsDeviceMemory(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: plain host memory on old runtimes
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

// Polls `ready` until it says done (true) or fails, sleeping between polls
// after a short spin; gives up at `deadline`.
template <typename Ready>
absl::Status Poll(absl::Time deadline, Ready ready, const std::function<absl::Status()>& late) {
  for (int i = 0;; ++i) {
    absl::StatusOr<bool> done = ready();
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
    if (absl::Now() >= deadline) return late();
    if (i >= kSpinPolls) absl::SleepFor(kPollSleep);
  }
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(int rank, int world, int device) : rank_(rank), world_(world), device_(device) {}
  ~NcclCollective() override;

  absl::Status Init(const ncclUniqueId& id, absl::Duration timeout);

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  bool AcceptsDeviceMemory() const override { return true; }
  absl::Status AllReduceSum(std::span<float> data, absl::Duration timeout) override;
  absl::Status AllReduceSumOnWire(std::span<float> data, WirePrecision wire,
                                  absl::Duration timeout) override;
  absl::Status AllReduceSumAfter(std::span<float> data, void* ready, WirePrecision wire,
                                 absl::Duration timeout) override;
  absl::Status Broadcast(std::span<float> data, int root, absl::Duration timeout) override;
  absl::Status Barrier(absl::Duration timeout) override;
  void Abort() override { abort_requested_.store(true); }

 private:
  using Op = std::function<ncclResult_t(float* buffer, size_t count)>;
  // Runs one collective over `data` (device or host memory) and waits for
  // it; the stream first waits for `after` on the device when it is set,
  // and runs `then` (more work on the stream) once NCCL has queued its own.
  absl::Status Run(std::span<float> data, absl::Duration timeout, const char* what, const Op& op,
                   cudaEvent_t after = nullptr,
                   const std::function<cudaError_t()>& then = nullptr);
  // A device span through 16-bit codes (wire_kernels.h), summed by NCCL in
  // that type; FP16 first agrees on its scale (one FP32 all-reduce of the
  // ranks' largest magnitudes, as the TCP ring does).
  absl::Status RunOnWire16(std::span<float> data, cudaEvent_t after, bool bf16,
                           absl::Duration timeout);
  // The sum over the ranks of each one's largest |value| of `data` (device
  // memory, after what the stream has queued); NaN if any is NaN.
  absl::StatusOr<float> Fp16Bound(std::span<const float> data, absl::Time deadline);
  absl::Status EnsureScratch(size_t count);
  absl::Status EnsureWireScratch(size_t count);
  // Polls until the communicator has no operation in progress.
  absl::Status WaitIdle(absl::Time deadline, const char* what);
  // Polls until `done_` (recorded after the work) completes.
  absl::Status WaitDone(absl::Time deadline, const char* what);
  absl::StatusOr<bool> CheckComm(const char* what);
  // Aborted after an earlier failure or an Abort(), else OK.
  absl::Status Usable();
  // Aborts the communicator and makes `st` the sticky error.
  absl::Status Fail(absl::Status st);

  const int rank_;
  const int world_;
  const int device_;
  std::atomic<bool> abort_requested_{false};
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  float* device_scratch_ = nullptr;
  float* host_scratch_ = nullptr;  // pinned
  size_t scratch_count_ = 0;
  uint16_t* wire_codes_ = nullptr;  // device, 16-bit codes of one call
  size_t wire_count_ = 0;
  float* device_partials_ = nullptr;  // nccl_wire::kPartials each
  float* host_partials_ = nullptr;    // pinned
  float bound_[1] = {0.0f};
  absl::Status sticky_;  // the first failure; OK while healthy
};

NcclCollective::~NcclCollective() {
  (void)cudaSetDevice(device_);
  if (comm_ != nullptr) {
    // A healthy communicator is finalised (flushing its work) then destroyed;
    // a failed, aborted or stuck one is aborted.
    bool clean = sticky_.ok() && !abort_requested_.load();
    if (clean) {
      const ncclResult_t rc = ncclCommFinalize(comm_);
      clean = rc == ncclSuccess || rc == ncclInProgress;
    }
    if (clean) {
      const absl::Time deadline = absl::Now() + kFinalizeTimeout;
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
             absl::Now() < deadline) {
        absl::SleepFor(kPollSleep);
      }
      clean = state == ncclSuccess;
    }
    if (clean) {
      (void)ncclCommDestroy(comm_);
    } else {
      (void)ncclCommAbort(comm_);
    }
  }
  if (done_ != nullptr) (void)cudaEventDestroy(done_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  if (device_scratch_ != nullptr) (void)cudaFree(device_scratch_);
  if (host_scratch_ != nullptr) (void)cudaFreeHost(host_scratch_);
  if (wire_codes_ != nullptr) (void)cudaFree(wire_codes_);
  if (device_partials_ != nullptr) (void)cudaFree(device_partials_);
  if (host_partials_ != nullptr) (void)cudaFreeHost(host_partials_);
}

absl::Status NcclCollective::Init(const ncclUniqueId& id, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  TAGI_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t rc = ncclCommInitRankConfig(&comm_, world_, id, rank_, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    return Fail(NcclError(rc, comm_, "ncclCommInitRankConfig"));
  }
  const absl::Status st = Poll(
      deadline, [this] { return CheckComm("creating the communicator"); },
      [&] {
        return absl::DeadlineExceededError(absl::StrFormat(
            "nccl backend: rank %d of %d: the communicator did not form within %s (did every "
            "rank join?)",
            rank_, world_, absl::FormatDuration(timeout)));
      });
  return st.ok() ? st : Fail(st);
}

absl::StatusOr<bool> NcclCollective::CheckComm(const char* what) {
  if (abort_requested_.load()) {
    return absl::AbortedError(absl::StrCat("nccl backend: aborted while ", what));
  }
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
  if (rc != ncclSuccess) return NcclError(rc, comm_, what);
  if (state == ncclInProgress) return false;
  if (state != ncclSuccess) return NcclError(state, comm_, what);
  return true;
}

absl::Status NcclCollective::WaitIdle(absl::Time deadline, const char* what) {
  return Poll(
      deadline, [&] { return CheckComm(what); },
      [&] {
        return absl::DeadlineExceededError(
            absl::StrFormat("nccl backend: %s was not enqueued before its deadline", what));
      });
}

absl::Status NcclCollective::WaitDone(absl::Time deadline, const char* what) {
  return Poll(
      deadline,
      [&]() -> absl::StatusOr<bool> {
        absl::StatusOr<bool> healthy = CheckComm(what);
        if (!healthy.ok()) return healthy.status();
        const cudaError_t q = cudaEventQuery(done_);
        if (q == cudaSuccess) return true;
        if (q == cudaErrorNotReady) return false;
        return cudart::CudaStatus(q, "cudaEventQuery", __FILE__, __LINE__);
      },
      [&] {
        return absl::DeadlineExceededError(absl::StrFormat(
            "nccl backend: rank %d of %d: %s did not complete before its deadline (a peer is "
            "missing or hung)",
            rank_, world_, what));
      });
}

absl::Status NcclCollective::Fail(absl::Status st) {
  if (comm_ != nullptr) {
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (sticky_.ok()) sticky_ = st;
  return st;
}

absl::Status NcclCollective::EnsureScratch(size_t count) {
  if (count <= scratch_count_) return absl::OkStatus();
  if (device_scratch_ != nullptr) (void)cudaFree(device_scratch_);
  if (host_scratch_ != nullptr) (void)cudaFreeHost(host_scratch_);
  device_scratch_ = nullptr;
  host_scratch_ = nullptr;
  scratch_count_ = 0;
  TAGI_CUDA_RETURN_IF_ERROR(cudaMalloc(&device_scratch_, count * sizeof(float)));
  void* host = nullptr;
  TAGI_CUDA_RETURN_IF_ERROR(cudaMallocHost(&host, count * sizeof(float)));
  host_scratch_ = static_cast<float*>(host);
  scratch_count_ = count;
  return absl::OkStatus();
}

absl::Status NcclCollective::Usable() {
  if (!sticky_.ok()) {
    return absl::AbortedError(
        absl::StrCat("nccl backend: unusable after an earlier failure: ", sticky_.message()));
  }
  if (abort_requested_.load()) return Fail(absl::AbortedError("nccl backend: aborted"));
  return absl::OkStatus();
}

absl::Status NcclCollective::EnsureWireScratch(size_t count) {
  if (device_partials_ == nullptr) {
    TAGI_CUDA_RETURN_IF_ERROR(cudaMalloc(&device_partials_, nccl_wire::kPartials * sizeof(float)));
    void* host = nullptr;
    TAGI_CUDA_RETURN_IF_ERROR(cudaMallocHost(&host, nccl_wire::kPartials * sizeof(float)));
    host_partials_ = static_cast<float*>(host);
  }
  if (count <= wire_count_) return absl::OkStatus();
  if (wire_codes_ != nullptr) (void)cudaFree(wire_codes_);
  wire_codes_ = nullptr;
  wire_count_ = 0;
  TAGI_CUDA_RETURN_IF_ERROR(cudaMalloc(&wire_codes_, count * sizeof(uint16_t)));
  wire_count_ = count;
  return absl::OkStatus();
}

absl::Status NcclCollective::Run(std::span<float> data, absl::Duration timeout, const char* what,
                                 const Op& op, cudaEvent_t after,
                                 const std::function<cudaError_t()>& then) {
  TAGI_RETURN_IF_ERROR(Usable());
  if (data.empty()) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + timeout;
  TAGI_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const bool on_device = IsDeviceMemory(data.data());
  float* buffer = data.data();
  const size_t bytes = data.size_bytes();
  if (!on_device) {
    // Host memory: through pinned memory, so that no copy blocks this
    // thread in the driver while a peer is late.
    TAGI_RETURN_IF_ERROR(EnsureScratch(data.size()));
    std::memcpy(host_scratch_, data.data(), bytes);
    TAGI_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(device_scratch_, host_scratch_, bytes, cudaMemcpyHostToDevice, stream_));
    buffer = device_scratch_;
  }
  if (after != nullptr) TAGI_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, after, 0));
  const ncclResult_t rc = op(buffer, data.size());
  if (rc != ncclSuccess && rc != ncclInProgress) return Fail(NcclError(rc, comm_, what));
  // Non-blocking communicator: the work is on the stream once it is idle.
  if (auto st = WaitIdle(deadline, what); !st.ok()) return Fail(st);
  if (then) TAGI_CUDA_RETURN_IF_ERROR(then());
  if (!on_device) {
    TAGI_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host_scratch_, device_scratch_, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_, stream_));
  if (auto st = WaitDone(deadline, what); !st.ok()) return Fail(st);
  if (!on_device) std::memcpy(data.data(), host_scratch_, bytes);
  return absl::OkStatus();
}

absl::Status NcclCollective::AllReduceSum(std::span<float> data, absl::Duration timeout) {
  return AllReduceSumAfter(data, nullptr, WirePrecision::kFp32, timeout);
}

absl::Status NcclCollective::AllReduceSumOnWire(std::span<float> data, WirePrecision wire,
                                                absl::Duration timeout) {
  return AllReduceSumAfter(data, nullptr, wire, timeout);
}

// The engine's deltas, final once its stream reaches `ready`: the work of
// this collective's stream (not this thread) waits for them, so the
// engine's later kernels and this all-reduce run side by side.
absl::Status NcclCollective::AllReduceSumAfter(std::span<float> data, void* ready,
                                               WirePrecision wire, absl::Duration timeout) {
  const bool on_device = !data.empty() && IsDeviceMemory(data.data());
  if (ready != nullptr && !data.empty() && !on_device) {
    return absl::InvalidArgumentError(
        "nccl backend: an all-reduce after a device event needs a span in device memory");
  }
  const auto after = static_cast<cudaEvent_t>(ready);
  if (wire != WirePrecision::kFp32) {
    if (!on_device && !data.empty()) {
      return absl::UnimplementedError(absl::StrFormat(
          "nccl backend: a %s wire takes device memory only", WirePrecisionName(wire)));
    }
    return RunOnWire16(data, after, wire == WirePrecision::kBf16, timeout);
  }
  return Run(
      data, timeout, "all-reduce",
      [this](float* buffer, size_t count) {
        return ncclAllReduce(buffer, buffer, count, ncclFloat, ncclSum, comm_, stream_);
      },
      after);
}

absl::StatusOr<float> NcclCollective::Fp16Bound(std::span<const float> data,
                                                absl::Time deadline) {
  TAGI_CUDA_RETURN_IF_ERROR(
      nccl_wire::MaxAbsPartials(data.data(), data.size(), device_partials_, stream_));
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_partials_, device_partials_,
                                            nccl_wire::kPartials * sizeof(float),
                                            cudaMemcpyDeviceToHost, stream_));
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_, stream_));
  if (auto st = WaitDone(deadline, "the FP16 scale's maxima"); !st.ok()) return Fail(st);
  float most = 0.0f;
  for (size_t k = 0; k < nccl_wire::kPartials && !std::isnan(most); ++k) {
    const float p = host_partials_[k];
    most = (p > most || std::isnan(p)) ? p : most;
  }
  bound_[0] = most;
  TAGI_RETURN_IF_ERROR(AllReduceSum(bound_, deadline - absl::Now()));
  return bound_[0];
}

absl::Status NcclCollective::RunOnWire16(std::span<float> data, cudaEvent_t after, bool bf16,
                                         absl::Duration timeout) {
  TAGI_RETURN_IF_ERROR(Usable());
  if (data.empty()) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + timeout;
  TAGI_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  TAGI_RETURN_IF_ERROR(EnsureWireScratch(data.size()));
  if (after != nullptr) TAGI_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, after, 0));
  float scale = 1.0f;
  if (!bf16) {
    TAGI_ASSIGN_OR_RETURN(const float bound, Fp16Bound(data, deadline));
    // A NaN or infinity somewhere: FP32 carries it to every rank, where the
    // engine's check refuses the step.
    if (!std::isfinite(bound)) return AllReduceSum(data, deadline - absl::Now());
    scale = Fp16Scale(bound);
  }
  // Narrowed into the codes, summed there in 16 bits, widened back.
  const size_t n = data.size();
  return Run(
      data, deadline - absl::Now(), bf16 ? "BF16 all-reduce" : "FP16 all-reduce",
      [&](float* buffer, size_t count) {
        if (nccl_wire::Narrow(bf16, buffer, scale, wire_codes_, count, stream_) != cudaSuccess) {
          return ncclUnhandledCudaError;
        }
        return ncclAllReduce(wire_codes_, wire_codes_, count, bf16 ? ncclBfloat16 : ncclFloat16,
                             ncclSum, comm_, stream_);
      },
      nullptr, [&] { return nccl_wire::Widen(bf16, wire_codes_, 1.0f / scale, data.data(), n,
                                             stream_); });
}

absl::Status NcclCollective::Broadcast(std::span<float> data, int root, absl::Duration timeout) {
  if (root < 0 || root >= world_) {
    return Fail(absl::InvalidArgumentError(
        absl::StrFormat("nccl backend: broadcast root %d is not a rank of %d", root, world_)));
  }
  return Run(data, timeout, "broadcast", [this, root](float* buffer, size_t count) {
    return ncclBroadcast(buffer, buffer, count, ncclFloat, root, comm_, stream_);
  });
}

absl::Status NcclCollective::Barrier(absl::Duration timeout) {
  float one = 1.0f;
  return AllReduceSum(std::span<float>(&one, 1), timeout);
}

absl::Status ValidateArgs(int rank, int world, const NcclOptions& options) {
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrFormat("nccl backend: rank %d is not a rank of a world of %d", rank, world));
  }
  if (options.device < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("nccl backend: device %d is not a CUDA ordinal", options.device));
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("nccl backend: connect_timeout must be positive");
  }
  return absl::OkStatus();
}

// Rank 0 makes the id and publishes it; the others wait for it.
absl::StatusOr<ncclUniqueId> ExchangeUniqueId(Store& store, int rank, const NcclOptions& options) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    TAGI_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
    const ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) return NcclError(rc, nullptr, "ncclGetUniqueId");
    TAGI_RETURN_IF_ERROR(
        store.Set(kNcclUniqueIdKey, std::string(id.internal, sizeof(id.internal))));
    return id;
  }
  absl::StatusOr<std::string> value = store.Get(kNcclUniqueIdKey, options.connect_timeout);
  if (absl::IsDeadlineExceeded(value.status())) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "nccl backend: rank %d waited %s for rank 0's unique id (store key \"%s\"): %s", rank,
        absl::FormatDuration(options.connect_timeout), kNcclUniqueIdKey, value.status().message()));
  }
  if (!value.ok()) return value.status();
  if (value->size() != sizeof(id.internal)) {
    return absl::DataLossError(
        absl::StrFormat("nccl backend: the unique id under \"%s\" has %d bytes, expected %d",
                        kNcclUniqueIdKey, value->size(), sizeof(id.internal)));
  }
  std::memcpy(id.internal, value->data(), sizeof(id.internal));
  return id;
}

}  // namespace

bool NcclCompiledIn() { return true; }

absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(Store& store, int rank, int world,
                                                                 const NcclOptions& options) {
  TAGI_RETURN_IF_ERROR(ValidateArgs(rank, world, options));
  const absl::Time start = absl::Now();
  TAGI_ASSIGN_OR_RETURN(const ncclUniqueId id, ExchangeUniqueId(store, rank, options));
  const absl::Duration left = options.connect_timeout - (absl::Now() - start);
  auto collective = std::make_unique<NcclCollective>(rank, world, options.device);
  TAGI_RETURN_IF_ERROR(collective->Init(id, std::max(left, absl::Milliseconds(1))));
  return std::unique_ptr<Collective>(std::move(collective));
}

}  // namespace tagi
