#include "worker/engine/cuda/cuda_engine.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/protocol.h"
#include "common/checksum.h"
#include "spec/hsm_tree.h"
#include "common/status.h"
#include "spec/buckets.h"
#include "spec/plan.h"
#include "worker/engine/cpu_engine.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_memory.h"
#include "worker/engine/cuda/image_kernels.h"
#include "worker/engine/cuda/kernels.h"
#include "worker/engine/cuda/layers.h"
#if TAGI_HAVE_CUDNN
#include "worker/engine/cuda/cudnn_conv.h"
#endif
#include "worker/engine/initialize.h"
#include "worker/engine/output.h"

namespace tagi::engine::cuda {

static_assert(sizeof(int32_t) == sizeof(float));

namespace {

// 64 floats = 256 bytes: the alignment cuBLAS's fastest kernels want.
constexpr size_t kAlignFloats = 64;

size_t RoundUp(size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

// Hands out aligned offsets in an arena that is allocated afterwards.
class Carver {
 public:
  size_t Take(size_t count) {
    const size_t at = size_;
    size_ += RoundUp(count);
    return at;
  }
  size_t size() const { return size_; }

 private:
  size_t size_ = 0;
};

enum class ReduceMode { kNone, kDevice, kHost };

}  // namespace

struct CudaEngineState {
  spec::Plan plan;  // laid out for max_batch; Reserve plans again for more
  bool fuse_activations = true;
  int device = 0;
  size_t n = 0;      // parameters
  size_t n_pad = 0;  // offset of the var half on the device

  // Declared before the layers, so destroyed after them: a layer keeps
  // references to the handles (a cuDNN convolution destroys its
  // descriptors through the handle's entry points).
  Stream stream;
  CublasHandle blas;
  // Created when a layer calls cuDNN (CudnnHandle is complete only in
  // builds with cuDNN, the only ones with such layers).
  std::shared_ptr<CudnnHandle> dnn;

  // One per planned layer, in plan order.
  std::vector<std::unique_ptr<CudaLayer>> layers;
  HeadDesc head;
  std::optional<HsmTree> tree;  // hierarchical softmax
  std::vector<float> node_scratch;

  Event uploaded;  // the last batch upload left the pinned staging buffer

  // Model arena: params [mu n_pad][var n_pad], deltas [mu n_pad][var n_pad]
  // [room for the state, S floats][control] (the reduce buffer), state (S
  // floats), the plan's derived buffers, HSM tables.
  DeviceFloats model;
  size_t deltas_offset = 0;
  size_t state_offset = 0;
  size_t derived_offset = 0;
  size_t hsm_nodes_offset = 0;
  size_t hsm_targets_offset = 0;

  // Batch arena: the plan's batch arena, then labels [max_batch] and
  // targets [max_batch][output width]. max_batch is 0 while none is held.
  size_t max_batch = 0;
  DeviceFloats batch;
  size_t out_stride = 0;  // max_batch * output width, rounded up
  size_t labels_offset = 0, targets_offset = 0;
  // Working memory of one layer call (CudaLayer::Prepare), shared.
  DeviceFloats workspace;
  size_t workspace_bytes = 0;

  // Synchronised batch statistics (SetBatchSync): the sums go through
  // pinned host memory to the caller's collective; the first failure of a
  // step fails that step.
  std::function<absl::Status(std::span<float>)> sync_sum;
  size_t sync_world = 1;
  PinnedFloats sync_host;
  std::optional<BatchSync> batch_sync;
  absl::Status sync_status;

  // Pinned host buffers: the batch going in ([x][targets][labels]), the
  // output coming out ([mu][var], out_stride apart), the control word, and
  // the host copy of the reduce buffer (allocated on first use).
  PinnedFloats staging;
  PinnedFloats host_out;
  PinnedFloats control;  // [control word][CheckReduced's flag]
  DeviceFloats nonfinite;  // CheckReduced's flag on the device
  PinnedFloats reduce_host;
  bool output_pending = false;  // host_out is being filled by the stream
  Event output_ready;           // host_out holds the last forward's output
  ReduceMode reduce = ReduceMode::kNone;
  // What the delta arena holds, so that no pass over it is made that the
  // capped step can do on the way (see ApplyStep): the deferred blocks (the
  // weights) still lack their var_w (var_w^2) factor until weights_scaled,
  // and every delta still lacks the factor pending_scale (the reduction's
  // average).
  bool weights_scaled = true;
  float pending_scale = 1.0f;

  // The backward's hand-out of final deltas (SetBackwardObserver): per plan
  // step, the watermark after it and an event recorded there when it moves.
  Engine::BackwardObserver observer;
  std::vector<size_t> ready_from;
  std::vector<Event> ready_events;

  float* params() const { return model.get(); }
  float* deltas() const { return model.get() + deltas_offset; }
  GaussianView at(const spec::Slot& slot) const {
    return {batch.get() + slot.mu, batch.get() + slot.var};
  }
  size_t input_width() const { return plan.input().size; }
  size_t output_width() const { return plan.output().size; }
  // Regression targets per sample: half the outputs when heteroscedastic.
  size_t target_width() const { return output_width() / head.units_per_target(); }
  bool classification() const { return head.kind == HeadKind::kClassification; }
  cudaStream_t s() const { return stream.get(); }
  CudaContext ctx() const { return {stream.get(), &blas, dnn.get(), workspace_bytes}; }
  float* control_word() const { return deltas() + 2 * n_pad + plan.num_state; }
  PendingFactors pending() const { return {!weights_scaled, pending_scale}; }
};

namespace {

absl::Status CheckDevice(int device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda:", device, ": no usable CUDA device (", cudaGetErrorString(err), ")"));
  }
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cuda:%d does not exist: this host has %d CUDA device(s)", device, count));
  }
  return absl::OkStatus();
}

ArenaBases Bases(const CudaEngineState& s) {
  return {s.params(),         s.deltas(), s.n_pad, s.model.get() + s.state_offset,
          s.model.get() + s.derived_offset, s.batch.get(), s.workspace.get()};
}
CudaLayerIo ModelIo(const CudaEngineState& s, size_t layer) {
  return engine::ModelIo(s.plan, Bases(s), layer);
}
CudaLayerIo StepIo(const CudaEngineState& s, const spec::Step& step, size_t batch) {
  return engine::StepIo(s.plan, Bases(s), step, batch);
}

// The activation that step `i` absorbs (the step before it), when it
// absorbs one.
std::optional<AbsorbedIo> AbsorbedBy(const CudaEngineState& s, size_t i, size_t batch) {
  if (i == 0 || !s.plan.steps[i - 1].absorbed) return std::nullopt;
  const spec::Step& act = s.plan.steps[i - 1];
  const spec::LayerSpec& spec = s.plan.layers[static_cast<size_t>(act.layer)].spec;
  return AbsorbedIo{static_cast<int>(spec.kind), spec.slope, StepIo(s, act, batch)};
}

// Calls fn(params, deltas, count) for every parameter block whose deltas
// are deferred (DefersVarianceFactor), in plan order.
template <typename Fn>
absl::Status ForEachDeferredBlock(const CudaEngineState& s, Fn fn) {
  for (size_t l = 0; l < s.plan.layers.size(); ++l) {
    const CudaLayerIo io = ModelIo(s, l);
    for (size_t k = 0; k < io.num_blocks; ++k) {
      if (s.layers[l]->DefersVarianceFactor(k)) {
        TAGI_RETURN_IF_ERROR(fn(io.params[k], io.deltas[k], io.block_size[k]));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status AllocateModelArena(CudaEngineState& s) {
  Carver c;
  c.Take(2 * s.n_pad);  // parameters
  s.deltas_offset = c.Take(2 * s.n_pad + s.plan.num_state + Model::kControlWords);
  s.state_offset = c.Take(s.plan.num_state);
  s.derived_offset = c.Take(s.plan.derived_floats);
  size_t table = 0;
  if (s.tree) {
    table = static_cast<size_t>(s.tree->num_classes()) * static_cast<size_t>(s.tree->levels());
    s.hsm_nodes_offset = c.Take(table);
    s.hsm_targets_offset = c.Take(table);
  }
  TAGI_ASSIGN_OR_RETURN(s.model, DeviceFloats::Allocate(c.size()));
  // Zero everything once: the padding of the halves must stay zero.
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s.model.get(), 0, c.size() * sizeof(float), s.s()));
  if (s.tree) {
    std::vector<int32_t> nodes(table);
    std::vector<float> targets(table);
    for (int r = 0; r < s.tree->num_classes(); ++r) {
      for (int l = 0; l < s.tree->levels(); ++l) {
        const size_t i = static_cast<size_t>(r) * s.tree->levels() + l;
        nodes[i] = s.tree->node(r, l);
        targets[i] = s.tree->target(r, l);
      }
    }
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.model.get() + s.hsm_nodes_offset, nodes.data(),
                                              table * sizeof(int32_t), cudaMemcpyHostToDevice,
                                              s.s()));
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.model.get() + s.hsm_targets_offset, targets.data(),
                                              table * sizeof(float), cudaMemcpyHostToDevice,
                                              s.s()));
  }
  // The tables above live in host vectors that end with this scope.
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.s()));
  return absl::OkStatus();
}

// Re-plans for `max_batch` and allocates the batch arena and the pinned
// buffers that go with it. The arena is zeroed: the data boundary's
// variances are never written and must read as zero (a residual block's
// identity shortcut adds them).
absl::Status AllocateBatchArena(CudaEngineState& s, size_t max_batch) {
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.s()));  // nothing may use the old ones
  TAGI_ASSIGN_OR_RETURN(
      s.plan, spec::MakePlan(s.plan.arch, {max_batch, kAlignFloats, s.fuse_activations}));
  Carver c;
  c.Take(s.plan.batch_floats);
  s.labels_offset = c.Take(max_batch);
  s.targets_offset = c.Take(max_batch * s.output_width());
  s.out_stride = RoundUp(max_batch * s.output_width());
  s.batch = DeviceFloats();  // free the old arena before taking the new one
  s.host_out = PinnedFloats();
  s.staging = PinnedFloats();
  s.max_batch = 0;
  TAGI_ASSIGN_OR_RETURN(s.batch, DeviceFloats::Allocate(c.size()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s.batch.get(), 0, c.size() * sizeof(float), s.s()));
  // The workspace: the largest any layer asks for at this batch.
  size_t bytes = 0;
  s.workspace = DeviceFloats();
  s.workspace_bytes = 0;
  for (const std::unique_ptr<CudaLayer>& layer : s.layers) {
    TAGI_ASSIGN_OR_RETURN(const size_t need, layer->Prepare(s.ctx(), max_batch));
    bytes = std::max(bytes, need);
  }
  TAGI_ASSIGN_OR_RETURN(s.workspace, DeviceFloats::Allocate((bytes + 3) / sizeof(float)));
  s.workspace_bytes = s.workspace.size() * sizeof(float);
  TAGI_ASSIGN_OR_RETURN(s.host_out, PinnedFloats::Allocate(2 * s.out_stride));
  TAGI_ASSIGN_OR_RETURN(
      s.staging, PinnedFloats::Allocate(max_batch * (s.input_width() + s.output_width() + 1)));
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.s()));
  s.max_batch = max_batch;
  s.output_pending = false;
  return absl::OkStatus();
}

// Copies between the packed host layout [mu n][var n] and the device one
// [mu n_pad][var n_pad], on the stream, then waits for them.
absl::Status CopyArena(const CudaEngineState& s, float* device, float* host, cudaMemcpyKind kind) {
  const size_t bytes = s.n * sizeof(float);
  if (kind == cudaMemcpyHostToDevice) {
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, host, bytes, kind, s.s()));
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device + s.n_pad, host + s.n, bytes, kind, s.s()));
  } else {
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, device, bytes, kind, s.s()));
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host + s.n, device + s.n_pad, bytes, kind, s.s()));
  }
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.s()));
  return absl::OkStatus();
}

// Brings the delta arena to the CPU engine's meaning (deferred blocks times
// their variance factor, everything times pending_scale): before the deltas
// leave in the CPU layout, or are summed with deltas that have.
absl::Status CanonicaliseDeltas(CudaEngineState& s) {
  if (!s.weights_scaled) {
    TAGI_RETURN_IF_ERROR(
        ForEachDeferredBlock(s, [&](GaussianView p, GaussianView d, size_t count) -> absl::Status {
          TAGI_CUDA_RETURN_IF_ERROR(kernels::ScaleWeightDeltas(p.var, count, d.mu, d.var, s.s()));
          return absl::OkStatus();
        }));
    s.weights_scaled = true;
  }
  if (s.pending_scale != 1.0f) {
    // The padding is zero and stays zero; the control word is not scaled.
    TAGI_CUDA_RETURN_IF_ERROR(kernels::Scale(s.deltas(), 2 * s.n_pad, s.pending_scale, s.s()));
    s.pending_scale = 1.0f;
  }
  return absl::OkStatus();
}

absl::Status RefreshAllDerived(const CudaEngineState& s) {
  for (size_t l = 0; l < s.layers.size(); ++l) {
    TAGI_RETURN_IF_ERROR(s.layers[l]->Refresh(s.ctx(), ModelIo(s, l)));
  }
  return absl::OkStatus();
}

}  // namespace

#define TAGI_USE_DEVICE() TAGI_CUDA_RETURN_IF_ERROR(cudaSetDevice(s_->device))

CudaEngine::CudaEngine(std::unique_ptr<CudaEngineState> state) : s_(std::move(state)) {}

CudaEngine::~CudaEngine() {
  // Finish queued work before the buffers it uses are freed.
  if (cudaSetDevice(s_->device) == cudaSuccess && s_->stream.get() != nullptr) {
    (void)cudaStreamSynchronize(s_->stream.get());
  }
}

absl::StatusOr<std::unique_ptr<CudaEngine>> CudaEngine::Create(const Architecture& arch,
                                                               size_t max_batch, int device,
                                                               const CudaEngineOptions& options) {
  const size_t batch = std::max<size_t>(max_batch, 1);
  TAGI_ASSIGN_OR_RETURN(spec::Plan plan,
                        spec::MakePlan(arch, {batch, kAlignFloats, options.fuse_activations}));
  TAGI_RETURN_IF_ERROR(CheckDevice(device));
  TAGI_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  auto s = std::make_unique<CudaEngineState>();
  s->plan = std::move(plan);
  s->fuse_activations = options.fuse_activations;
  s->device = device;
  s->n = s->plan.num_parameters;
  s->n_pad = RoundUp(s->n);
  for (const spec::PlannedLayer& l : s->plan.layers) {
    TAGI_ASSIGN_OR_RETURN(std::unique_ptr<CudaLayer> layer, CudaLayers().Make(l));
    s->layers.push_back(std::move(layer));
  }
  s->head = arch.head;
  if (arch.head.hierarchical_softmax()) {
    s->tree.emplace(static_cast<int>(arch.head.num_classes));
    s->node_scratch.resize(static_cast<size_t>(s->tree->output_width()));
  }
  TAGI_ASSIGN_OR_RETURN(s->stream, Stream::Create());
  TAGI_ASSIGN_OR_RETURN(s->blas, CublasHandle::Create(s->stream.get()));
#if TAGI_HAVE_CUDNN
  for (const std::unique_ptr<CudaLayer>& layer : s->layers) {
    if (!layer->NeedsCudnn()) continue;
    TAGI_ASSIGN_OR_RETURN(CudnnHandle dnn, CudnnHandle::Create(s->stream.get()));
    s->dnn = std::make_shared<CudnnHandle>(std::move(dnn));
    break;
  }
#endif
  TAGI_ASSIGN_OR_RETURN(s->uploaded, Event::Create());
  TAGI_ASSIGN_OR_RETURN(s->output_ready, Event::Create());
  TAGI_ASSIGN_OR_RETURN(s->control, PinnedFloats::Allocate(Model::kControlWords + 1));
  TAGI_ASSIGN_OR_RETURN(s->nonfinite, DeviceFloats::Allocate(1));
  TAGI_RETURN_IF_ERROR(AllocateModelArena(*s));
  TAGI_RETURN_IF_ERROR(AllocateBatchArena(*s, batch));
  // Record once so that the first upload's wait has an event to wait on.
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(s->uploaded.get(), s->stream.get()));
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(s)));
}

int CudaEngine::ordinal() const { return s_->device; }
const Architecture& CudaEngine::architecture() const { return s_->plan.arch; }
std::string CudaEngine::device() const { return absl::StrCat("cuda:", s_->device); }

absl::Status CudaEngine::Reserve(size_t max_batch) {
  if (max_batch <= s_->max_batch) return absl::OkStatus();
  TAGI_USE_DEVICE();
  return AllocateBatchArena(*s_, max_batch);
}

absl::Status CudaEngine::Initialize(uint64_t seed, const InitOptions& options) {
  // The shared initialiser draws on the host: the same seed gives the same
  // bits on every device.
  std::vector<float> params(2 * s_->n);
  InitializeParameters(s_->plan, seed, options, params);
  TAGI_RETURN_IF_ERROR(WriteParameters(params));
  std::vector<float> state(s_->plan.num_state);
  InitializeState(s_->plan, state);
  return WriteState(state);
}

absl::Status CudaEngine::ReadParameters(std::span<float> out) {
  TAGI_RETURN_IF_ERROR(CheckArenaSpan("ReadParameters", out.size(), s_->n));
  TAGI_USE_DEVICE();
  return CopyArena(*s_, s_->params(), out.data(), cudaMemcpyDeviceToHost);
}

absl::Status CudaEngine::WriteParameters(std::span<const float> in) {
  TAGI_RETURN_IF_ERROR(CheckArenaSpan("WriteParameters", in.size(), s_->n));
  TAGI_USE_DEVICE();
  TAGI_RETURN_IF_ERROR(
      CopyArena(*s_, s_->params(), const_cast<float*>(in.data()), cudaMemcpyHostToDevice));
  TAGI_RETURN_IF_ERROR(RefreshAllDerived(*s_));
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s_->s()));
  return absl::OkStatus();
}

absl::Status CudaEngine::ReadState(std::span<float> out) {
  const size_t count = s_->plan.num_state;
  TAGI_RETURN_IF_ERROR(CheckStateSpan("ReadState", out.size(), count));
  if (count == 0) return absl::OkStatus();
  TAGI_USE_DEVICE();
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.data(), s_->model.get() + s_->state_offset,
                                            count * sizeof(float), cudaMemcpyDeviceToHost,
                                            s_->s()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s_->s()));
  return absl::OkStatus();
}

absl::Status CudaEngine::WriteState(std::span<const float> in) {
  const size_t count = s_->plan.num_state;
  TAGI_RETURN_IF_ERROR(CheckStateSpan("WriteState", in.size(), count));
  if (count == 0) return absl::OkStatus();
  TAGI_USE_DEVICE();
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_->model.get() + s_->state_offset, in.data(),
                                            count * sizeof(float), cudaMemcpyHostToDevice,
                                            s_->s()));
  // The caller may free `in` on return.
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s_->s()));
  return absl::OkStatus();
}

absl::Status CudaEngine::ReadDeltas(std::span<float> out) {
  TAGI_RETURN_IF_ERROR(CheckArenaSpan("ReadDeltas", out.size(), s_->n));
  TAGI_USE_DEVICE();
  TAGI_RETURN_IF_ERROR(CopyArena(*s_, s_->deltas(), out.data(), cudaMemcpyDeviceToHost));
  if (s_->weights_scaled && s_->pending_scale == 1.0f) return absl::OkStatus();
  // The factors still pending, applied on the host in the kernels' order,
  // leaving the arena as it is, so that the next ApplyStep still applies
  // them itself (this copy is for tests and diagnostics; training never
  // reads it).
  const size_t n = s_->n;
  if (!s_->weights_scaled) {
    std::vector<float> params(2 * n);
    TAGI_RETURN_IF_ERROR(CopyArena(*s_, s_->params(), params.data(), cudaMemcpyDeviceToHost));
    TAGI_RETURN_IF_ERROR(ForEachDeferredBlock(
        *s_, [&](GaussianView p, GaussianView /*d*/, size_t count) -> absl::Status {
          const size_t offset = static_cast<size_t>(p.mu - s_->params());
          for (size_t i = offset; i < offset + count; ++i) {
            const float vs = params[n + i];
            out[i] *= vs;
            out[n + i] *= vs * vs;
          }
          return absl::OkStatus();
        }));
  }
  const float scale = s_->pending_scale;
  for (float& d : out) d *= scale;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> CudaEngine::ParameterFingerprint() {
  // The CPU engine's checksum (common ModelFingerprint): the parameters,
  // combined with the state when there is any.
  std::vector<float> host(2 * s_->n);
  TAGI_RETURN_IF_ERROR(ReadParameters(host));
  std::vector<float> state(s_->plan.num_state);
  TAGI_RETURN_IF_ERROR(ReadState(state));
  return ModelFingerprint(host.data(), host.size(), state.data(), state.size());
}

absl::Status CudaEngine::Upload(const float* x, const int32_t* labels, const float* targets,
                                size_t batch) {
  CudaEngineState& s = *s_;
  TAGI_RETURN_IF_ERROR(Reserve(batch));
  // The previous batch must have left the staging buffer before it is reused.
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.uploaded.get()));
  const size_t nx = batch * s.input_width();
  const size_t ny = batch * s.target_width();
  float* stage_x = s.staging.get();
  float* stage_y = stage_x + s.max_batch * s.input_width();
  float* stage_labels = stage_y + s.max_batch * s.output_width();
  std::memcpy(stage_x, x, nx * sizeof(float));
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.at(s.plan.input().units).mu, stage_x,
                                            nx * sizeof(float), cudaMemcpyHostToDevice, s.s()));
  if (labels != nullptr) {
    std::memcpy(stage_labels, labels, batch * sizeof(int32_t));
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.batch.get() + s.labels_offset, stage_labels,
                                              batch * sizeof(int32_t), cudaMemcpyHostToDevice,
                                              s.s()));
  }
  if (targets != nullptr) {
    std::memcpy(stage_y, targets, ny * sizeof(float));
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.batch.get() + s.targets_offset, stage_y,
                                              ny * sizeof(float), cudaMemcpyHostToDevice, s.s()));
  }
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.uploaded.get(), s.s()));
  return absl::OkStatus();
}

absl::Status CudaEngine::RunForward(size_t batch, Mode mode) {
  CudaEngineState& s = *s_;
  const CudaContext ctx = s.ctx();
  for (size_t i = 0; i < s.plan.steps.size(); ++i) {
    const spec::Step& step = s.plan.steps[i];
    if (step.absorbed) continue;  // the next step runs it
    if (step.op == spec::Step::Op::kLayer) {
      CudaLayerIo io = StepIo(s, step, batch);
      if (mode == Mode::kTrain && s.batch_sync) io.sync = &*s.batch_sync;
      CudaLayer& layer = *s.layers[static_cast<size_t>(step.layer)];
      if (const std::optional<AbsorbedIo> act = AbsorbedBy(s, i, batch)) {
        TAGI_RETURN_IF_ERROR(layer.ForwardAbsorbing(ctx, io, *act, mode));
      } else {
        TAGI_RETURN_IF_ERROR(layer.Forward(ctx, io, mode));
      }
      continue;
    }
    // A residual merge: the branches are independent, so means and
    // variances add (docs/maths.md section 13).
    const spec::BoundaryPlan& out = s.plan.boundaries[static_cast<size_t>(step.out)];
    const GaussianView a = s.at(s.plan.boundaries[static_cast<size_t>(step.in)].units);
    const GaussianView b = s.at(s.plan.boundaries[static_cast<size_t>(step.in2)].units);
    const GaussianView o = s.at(out.units);
    TAGI_CUDA_RETURN_IF_ERROR(
        kernels::AddGaussians(a.mu, a.var, b.mu, b.var, batch * out.size, o.mu, o.var, s.s()));
  }
  // The output units go to the host while the rest of the step runs.
  const GaussianView last = s.at(s.plan.output().units);
  const size_t bytes = batch * s.output_width() * sizeof(float);
  TAGI_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(s.host_out.get(), last.mu, bytes, cudaMemcpyDeviceToHost, s.s()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.host_out.get() + s.out_stride, last.var, bytes,
                                            cudaMemcpyDeviceToHost, s.s()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.output_ready.get(), s.s()));
  s.output_pending = true;
  return absl::OkStatus();
}

absl::Status CudaEngine::OutputUpdate(size_t batch, float sigma_v) {
  CudaEngineState& s = *s_;
  const GaussianView out = s.at(s.plan.output().units);
  const GaussianView delta = s.at(s.plan.output().delta);
  const float var_v = sigma_v * sigma_v;
  const size_t width = s.output_width();
  const size_t n = batch * width;
  const auto* labels = reinterpret_cast<const int32_t*>(s.batch.get() + s.labels_offset);
  const float* targets = s.batch.get() + s.targets_offset;
  if (s.tree) {
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(delta.mu, 0, n * sizeof(float), s.s()));
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(delta.var, 0, n * sizeof(float), s.s()));
    const auto* nodes = reinterpret_cast<const int32_t*>(s.model.get() + s.hsm_nodes_offset);
    TAGI_CUDA_RETURN_IF_ERROR(kernels::HsmDeltas(
        out.mu, out.var, batch, width, labels, nodes, s.model.get() + s.hsm_targets_offset,
        s.tree->levels(), var_v, delta.mu, delta.var, s.s()));
  } else if (s.head.one_hot) {
    TAGI_CUDA_RETURN_IF_ERROR(kernels::OneHotDeltas(out.mu, out.var, batch, width, labels, var_v,
                                                    delta.mu, delta.var, s.s()));
  } else if (s.head.heteroscedastic) {
    TAGI_CUDA_RETURN_IF_ERROR(kernels::HeteroscedasticDeltas(
        out.mu, out.var, s.batch.get() + s.plan.output().jcb, targets, n / 2, delta.mu,
        delta.var, s.s()));
  } else {
    TAGI_CUDA_RETURN_IF_ERROR(kernels::RegressionDeltas(out.mu, out.var, targets, n, var_v,
                                                        delta.mu, delta.var, s.s()));
  }
  return absl::OkStatus();
}

namespace {

// After backward step i: when the watermark moved, an event on the stream
// marks where the deltas above it are final, and the observer gets both.
absl::Status HandOutFinalDeltas(CudaEngineState& s, size_t i) {
  if (!s.observer) return absl::OkStatus();
  const size_t before = i + 1 < s.ready_from.size() ? s.ready_from[i + 1] : s.n;
  if (s.ready_from[i] == before) return absl::OkStatus();
  cudaEvent_t event = s.ready_events[i].get();
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, s.s()));
  s.observer(s.ready_from[i], event);
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaEngine::RunBackward(size_t batch) {
  CudaEngineState& s = *s_;
  const CudaContext ctx = s.ctx();
  for (size_t i = s.plan.steps.size(); i-- > 0;) {
    const spec::Step& step = s.plan.steps[i];
    const spec::BoundaryPlan& out = s.plan.boundaries[static_cast<size_t>(step.out)];
    const size_t n = batch * out.size;
    const GaussianView delta_out = s.at(out.delta);
    // Every consumer of this boundary has run: its innovations are the sum
    // of what each of them sent back (a fork of a residual block).
    for (const spec::Slot& partial : out.partials) {
      const GaussianView p = s.at(partial);
      TAGI_CUDA_RETURN_IF_ERROR(
          kernels::Accumulate(p.mu, p.var, n, delta_out.mu, delta_out.var, s.s()));
    }
    if (step.absorbed) continue;  // its absorber wrote its input's innovations
    if (step.op == spec::Step::Op::kLayer) {
      CudaLayer& layer = *s.layers[static_cast<size_t>(step.layer)];
      const CudaLayerIo io = StepIo(s, step, batch);
      if (const std::optional<AbsorbedIo> act = AbsorbedBy(s, i, batch)) {
        TAGI_RETURN_IF_ERROR(layer.BackwardAbsorbing(ctx, io, *act));
      } else {
        TAGI_RETURN_IF_ERROR(layer.Backward(ctx, io));
      }
      TAGI_RETURN_IF_ERROR(HandOutFinalDeltas(s, i));
      continue;
    }
    // A residual merge passes the innovations of its output unchanged to
    // both branches.
    for (const auto& [boundary, slot] :
         {std::pair{step.in, step.in_delta}, std::pair{step.in2, step.in2_delta}}) {
      if (s.plan.boundaries[static_cast<size_t>(boundary)].is_input) continue;
      const GaussianView d = s.at(slot);
      const size_t bytes = n * sizeof(float);
      TAGI_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(d.mu, delta_out.mu, bytes, cudaMemcpyDeviceToDevice, s.s()));
      TAGI_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(d.var, delta_out.var, bytes, cudaMemcpyDeviceToDevice, s.s()));
    }
  }
  s.weights_scaled = false;
  s.pending_scale = 1.0f;
  return absl::OkStatus();
}

absl::Status CudaEngine::WaitForOutput() {
  if (s_->output_pending) {
    // Only the forward pass and its copy: the backward pass queued after it
    // runs on while the host reads the output.
    TAGI_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s_->output_ready.get()));
    s_->output_pending = false;
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::Forward(const float* x, size_t batch) {
  TAGI_USE_DEVICE();
  TAGI_RETURN_IF_ERROR(Upload(x, nullptr, nullptr, batch));
  return RunForward(batch, Mode::kEval);
}

absl::StatusOr<ConstGaussianView> CudaEngine::Output(size_t batch) {
  if (batch > s_->max_batch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Output: batch %d exceeds the %d the engine holds", batch, s_->max_batch));
  }
  TAGI_USE_DEVICE();
  TAGI_RETURN_IF_ERROR(WaitForOutput());
  return ConstGaussianView{s_->host_out.get(), s_->host_out.get() + s_->out_stride};
}

absl::Status CudaEngine::ClassProbabilities(size_t batch, float* probs) {
  if (!s_->classification()) {
    return absl::FailedPreconditionError("ClassProbabilities: the model is not a classifier");
  }
  TAGI_ASSIGN_OR_RETURN(const ConstGaussianView out, Output(batch));
  if (s_->tree) {
    HsmClassProbabilities(*s_->tree, out, batch, probs, s_->node_scratch.data());
  } else {
    MeanClassProbabilities(out, batch, s_->output_width(), probs);
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::TrainStep(const float* x, const int32_t* labels, const float* targets,
                                   size_t batch, float sigma_v) {
  TAGI_USE_DEVICE();
  const bool classification = s_->classification();
  if (classification ? labels == nullptr : targets == nullptr) {
    return absl::InvalidArgumentError(classification ? "TrainStep: a classifier needs labels"
                                                     : "TrainStep: regression needs targets");
  }
  TAGI_RETURN_IF_ERROR(
      Upload(x, classification ? labels : nullptr, classification ? nullptr : targets, batch));
  TAGI_RETURN_IF_ERROR(RunForward(batch, Mode::kTrain));
  TAGI_RETURN_IF_ERROR(OutputUpdate(batch, sigma_v));
  TAGI_RETURN_IF_ERROR(RunBackward(batch));
  return std::exchange(s_->sync_status, absl::OkStatus());
}

absl::Status CudaEngine::SetBatchSync(std::function<absl::Status(std::span<float>)> sum,
                                      size_t world) {
  CudaEngineState& s = *s_;
  TAGI_USE_DEVICE();
  // The largest sum a layer makes: a BatchNorm's 2 * channels.
  size_t largest = 0;
  for (const spec::PlannedLayer& l : s.plan.layers) {
    if (l.spec.kind == tagi::v1::Layer::BATCH_NORM) largest = std::max<size_t>(largest, 2 * l.in.c);
  }
  if (s.sync_host.size() < largest) {
    TAGI_ASSIGN_OR_RETURN(s.sync_host, PinnedFloats::Allocate(largest));
  }
  s.sync_sum = std::move(sum);
  s.sync_world = world;
  s.sync_status = absl::OkStatus();
  // Sums device memory in place: to the pinned buffer, the caller's sum,
  // and back (the copy back is ordered before any later use on the stream).
  auto device_sum = [&s](std::span<float> values) -> absl::Status {
    if (values.size() > s.sync_host.size()) {
      return absl::InternalError("batch sync: more values than planned");
    }
    const size_t bytes = values.size() * sizeof(float);
    float* host = s.sync_host.get();
    TAGI_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host, values.data(), bytes, cudaMemcpyDeviceToHost, s.s()));
    TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.s()));
    TAGI_RETURN_IF_ERROR(s.sync_sum({host, values.size()}));
    TAGI_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(values.data(), host, bytes, cudaMemcpyHostToDevice, s.s()));
    return absl::OkStatus();
  };
  s.batch_sync = BatchSync{[&s, device_sum](std::span<float> values) {
                             if (!s.sync_status.ok()) return false;
                             s.sync_status = device_sum(values);
                             return s.sync_status.ok();
                           },
                           world};
  return absl::OkStatus();
}

absl::StatusOr<Engine::ReduceBuffer> CudaEngine::SetBackwardObserver(BackwardObserver ready,
                                                                     bool device_memory) {
  CudaEngineState& s = *s_;
  TAGI_USE_DEVICE();
  if (!ready) {
    s.observer = nullptr;
    return ReduceBuffer{};
  }
  if (!device_memory) {
    return absl::UnimplementedError(
        "the CUDA engine hands out its deltas in device memory only; a host collective reduces "
        "them after the backward pass");
  }
  s.ready_from = spec::ReadyFromAfterStep(s.plan);
  // One event per plan step, made once (an event may be recorded again
  // once the collective's stream has taken its last recording: Finish
  // waits for every bucket before the next TrainStep).
  while (s.ready_events.size() < s.ready_from.size()) {
    TAGI_ASSIGN_OR_RETURN(Event e, Event::Create());
    s.ready_events.push_back(std::move(e));
  }
  s.observer = std::move(ready);
  return ReduceBuffer{
      std::span<float>(s.deltas(), 2 * s.n_pad + s.plan.num_state + Model::kControlWords),
      s.n_pad};
}

absl::StatusOr<std::span<float>> CudaEngine::BeginReduce(bool device_memory, float control) {
  CudaEngineState& s = *s_;
  TAGI_USE_DEVICE();
  if (device_memory) {
    // All ranks are GPU engines (NCCL): they sum their deltas as they are.
    // The replicas are identical, so var_w is the same on every rank and
    // sum_r(var_w * d_r) = var_w * sum_r(d_r): the factor still pending is
    // applied once, by the capped step. Earlier factors from an unusual
    // call sequence are applied first, so that every rank sums alike.
    if (s.pending_scale != 1.0f) TAGI_RETURN_IF_ERROR(CanonicaliseDeltas(s));
    // The control word rides after the two padded halves. The caller's
    // collective runs on its own stream: the deltas must be complete first.
    // The state (running statistics) rides after them, the control word last.
    s.control.get()[0] = control;
    float* buffer = s.deltas();
    const size_t state = s.plan.num_state;
    if (state > 0) {
      TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buffer + 2 * s.n_pad,
                                                s.model.get() + s.state_offset,
                                                state * sizeof(float), cudaMemcpyDeviceToDevice,
                                                s.s()));
    }
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.control_word(), s.control.get(), sizeof(float),
                                              cudaMemcpyHostToDevice, s.s()));
    TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.s()));
    s.reduce = ReduceMode::kDevice;
    return std::span<float>(buffer, 2 * s.n_pad + state + Model::kControlWords);
  }
  // Host staging in the packed CPU layout and meaning, so CPU ranks can
  // join the sum.
  TAGI_RETURN_IF_ERROR(CanonicaliseDeltas(s));
  const size_t state = s.plan.num_state;
  const size_t size = 2 * s.n + state + Model::kControlWords;
  if (s.reduce_host.size() < size) {
    TAGI_ASSIGN_OR_RETURN(s.reduce_host, PinnedFloats::Allocate(size));
  }
  if (state > 0) {
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.reduce_host.get() + 2 * s.n,
                                              s.model.get() + s.state_offset,
                                              state * sizeof(float), cudaMemcpyDeviceToHost,
                                              s.s()));
  }
  // CopyArena waits for the stream, the state's copy included.
  TAGI_RETURN_IF_ERROR(CopyArena(s, s.deltas(), s.reduce_host.get(), cudaMemcpyDeviceToHost));
  s.reduce_host.get()[2 * s.n + state] = control;
  s.reduce = ReduceMode::kHost;
  return std::span<float>(s.reduce_host.get(), size);
}

absl::Status CudaEngine::CheckReduced() {
  CudaEngineState& s = *s_;
  TAGI_USE_DEVICE();
  const size_t state = s.plan.num_state;
  if (s.reduce == ReduceMode::kHost) {
    return CheckFiniteReduced(
        std::span<const float>(s.reduce_host.get(), 2 * s.n + state + Model::kControlWords));
  }
  if (s.reduce != ReduceMode::kDevice) {
    return absl::FailedPreconditionError("CheckReduced without BeginReduce");
  }
  // The padding between the halves is zero: the whole buffer is checked.
  float* flag = s.control.get() + Model::kControlWords;
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s.nonfinite.get(), 0, sizeof(float), s.s()));
  TAGI_CUDA_RETURN_IF_ERROR(kernels::FlagNonFinite(
      s.deltas(), 2 * s.n_pad + state + Model::kControlWords, s.nonfinite.get(), s.s()));
  TAGI_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(flag, s.nonfinite.get(), sizeof(float), cudaMemcpyDeviceToHost, s.s()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.s()));
  if (*flag != 0.0f) {
    return absl::DataLossError(absl::StrCat(
        kNonFiniteStepReason,
        ": a value of the all-reduced deltas is not finite (a rank sent NaN or Inf); the step is "
        "not applied"));
  }
  return absl::OkStatus();
}

// The reduced state comes back times state_scale (the replicas' average),
// as the CPU engine takes it (Model::TakeReducedState).
absl::StatusOr<float> CudaEngine::EndReduce(float scale, float state_scale) {
  CudaEngineState& s = *s_;
  TAGI_USE_DEVICE();
  const ReduceMode mode = s.reduce;
  s.reduce = ReduceMode::kNone;
  float control = 0.0f;
  const size_t state = s.plan.num_state;
  float* device_state = s.model.get() + s.state_offset;
  if (mode == ReduceMode::kDevice) {
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.control.get(), s.control_word(), sizeof(float),
                                              cudaMemcpyDeviceToHost, s.s()));
    TAGI_CUDA_RETURN_IF_ERROR(
        kernels::ScaleInto(s.deltas() + 2 * s.n_pad, state, state_scale, device_state, s.s()));
  } else if (mode == ReduceMode::kHost) {
    float* reduced = s.reduce_host.get() + 2 * s.n;
    control = reduced[state];
    for (size_t i = 0; i < state; ++i) reduced[i] *= state_scale;
    if (state > 0) {
      TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_state, reduced, state * sizeof(float),
                                                cudaMemcpyHostToDevice, s.s()));
    }
    // CopyArena waits for the stream: the state's copy has left the buffer.
    TAGI_RETURN_IF_ERROR(CopyArena(s, s.deltas(), s.reduce_host.get(), cudaMemcpyHostToDevice));
  } else {
    return absl::FailedPreconditionError("EndReduce without BeginReduce");
  }
  // The scale waits for the capped step, which applies it on the way.
  s.pending_scale *= scale;
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.s()));
  if (mode == ReduceMode::kDevice) control = s.control.get()[0];
  return control;
}

absl::Status CudaEngine::ApplyStep(float cap_factor) {
  CudaEngineState& s = *s_;
  TAGI_USE_DEVICE();
  const float inv_cap = 1.0f / cap_factor;
  const PendingFactors pending = s.pending();
  for (size_t l = 0; l < s.layers.size(); ++l) {
    TAGI_RETURN_IF_ERROR(
        s.layers[l]->ApplyStep(s.ctx(), ModelIo(s, l), inv_cap, kVarianceFloor, pending));
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::ReadOutputInnovations(size_t batch, std::span<float> delta_mu,
                                               std::span<float> delta_var) {
  const size_t n = batch * s_->output_width();
  if (batch > s_->max_batch || delta_mu.size() != n || delta_var.size() != n) {
    return absl::InvalidArgumentError("ReadOutputInnovations: wrong batch or span sizes");
  }
  TAGI_USE_DEVICE();
  const GaussianView d = s_->at(s_->plan.output().delta);
  TAGI_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(delta_mu.data(), d.mu, n * sizeof(float), cudaMemcpyDeviceToHost, s_->s()));
  TAGI_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(delta_var.data(), d.var, n * sizeof(float), cudaMemcpyDeviceToHost, s_->s()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s_->s()));
  return absl::OkStatus();
}

}  // namespace tagi::engine::cuda
