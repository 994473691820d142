#include "worker/engine/cuda/cuda_engine.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checksum.h"
#include "common/hsm_tree.h"
#include "common/status.h"
#include "worker/engine/cpu_engine.h"
#include "worker/engine/cuda/cublas_gemm.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_memory.h"
#include "worker/engine/cuda/kernels.h"
#include "worker/engine/output.h"

namespace tagi::engine::cuda {

// LayerKind numbers are elementwise::ActivationKind (asserted in activation.cc).
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

// One LINEAR layer: its place in the halves of the arenas and its buffers.
struct LinearSlot {
  size_t in = 0;
  size_t out = 0;
  size_t offset = 0;           // of its weights in each half (biases follow)
  size_t derived_offset = 0;   // mu_w^2 then mu_w^2 + var_w, in the model arena
  size_t in_mu_sq_offset = 0;  // [max_batch][in], in the batch arena
  bool input_variance_zero = false;
  size_t weights() const { return in * out; }
};

struct LayerSlot {
  LayerKind kind = LayerKind::kLinear;
  float slope = 0.0f;
  int linear = -1;  // index into linears, LINEAR layers only
};

// Per-batch buffers of one layer boundary (offsets into the batch arena).
struct BoundarySlot {
  size_t width = 0;
  bool has_jcb = false;
  size_t mu = 0, var = 0, jcb = 0;
};

enum class ReduceMode { kNone, kDevice, kHost };

}  // namespace

struct CudaEngineState {
  Architecture arch;
  int device = 0;
  size_t n = 0;      // parameters
  size_t n_pad = 0;  // offset of the var half on the device
  std::vector<LayerSlot> layers;
  std::vector<LinearSlot> linears;
  std::vector<BoundarySlot> bounds;  // layers.size() + 1
  std::optional<HsmTree> tree;
  std::vector<float> node_scratch;

  Stream stream;
  CublasHandle blas;
  Event uploaded;  // the last batch upload left the pinned staging buffer

  // Model arena: params [mu n_pad][var n_pad], deltas [mu n_pad][var n_pad]
  // [control], derived buffers, HSM tables.
  DeviceFloats model;
  size_t deltas_offset = 0;
  size_t hsm_nodes_offset = 0;
  size_t hsm_targets_offset = 0;

  // Batch arena, sized for max_batch.
  size_t max_batch = 0;
  DeviceFloats batch;
  size_t delta_a = 0, delta_b = 0, delta_out = 0;  // each mu then var, `delta_stride` apart
  size_t delta_stride = 0;
  size_t out_stride = 0;  // max_batch * output width
  size_t labels_offset = 0, targets_offset = 0;

  // Pinned host buffers: the batch going in ([x][targets][labels]), the
  // output coming out ([mu][var], out_stride apart), the control word, and
  // the host copy of the reduce buffer (allocated on first use).
  PinnedFloats staging;
  PinnedFloats host_out;
  PinnedFloats control;
  PinnedFloats reduce_host;
  bool output_pending = false;  // host_out is being filled by the stream
  Event output_ready;           // host_out holds the last forward's output
  ReduceMode reduce = ReduceMode::kNone;
  // What the delta arena holds, so that no pass over it is made that the
  // capped step can do on the way (see ApplyStep): the weights' deltas
  // still lack their var_w (var_w^2) factor until weights_scaled, and every
  // delta still lacks the factor pending_scale (the reduction's average).
  bool weights_scaled = true;
  float pending_scale = 1.0f;

  float* params() const { return model.get(); }
  float* deltas() const { return model.get() + deltas_offset; }
  float* at(size_t batch_offset) const { return batch.get() + batch_offset; }
  size_t input_width() const { return bounds.front().width; }
  size_t output_width() const { return bounds.back().width; }
  cudaStream_t s() const { return stream.get(); }
};

namespace {

// Slices of one LINEAR layer in an arena whose var half starts at n_pad.
struct Slices {
  float* w_mu;
  float* w_var;
  float* b_mu;
  float* b_var;
};
Slices SlicesOf(float* base, size_t n_pad, const LinearSlot& l) {
  return {base + l.offset, base + n_pad + l.offset, base + l.offset + l.weights(),
          base + n_pad + l.offset + l.weights()};
}

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

absl::Status BuildSlots(CudaEngineState& s) {
  const Architecture& arch = s.arch;
  size_t width = arch.input_width();
  s.bounds.push_back({width, false});
  size_t offset = 0;
  for (const LayerDesc& d : arch.layers) {
    LayerSlot layer{d.kind, d.slope, -1};
    if (d.kind == LayerKind::kLinear) {
      LinearSlot l;
      l.in = d.in;
      l.out = d.out;
      l.offset = offset;
      offset += l.weights() + l.out;
      layer.linear = static_cast<int>(s.linears.size());
      s.linears.push_back(l);
      width = d.out;
    }
    s.layers.push_back(layer);
    s.bounds.push_back({width, d.kind != LayerKind::kLinear});
  }
  s.linears.front().input_variance_zero = true;  // the first layer reads the data
  s.n = arch.num_parameters();
  if (offset != s.n) {
    return absl::InternalError(absl::StrFormat(
        "CudaEngine: layers hold %d parameters, the architecture says %d", offset, s.n));
  }
  s.n_pad = RoundUp(s.n);
  if (arch.head.kind == HeadKind::kClassification) {
    s.tree.emplace(static_cast<int>(arch.head.num_classes));
    s.node_scratch.resize(static_cast<size_t>(s.tree->output_width()));
  }
  return absl::OkStatus();
}

absl::Status AllocateModelArena(CudaEngineState& s) {
  Carver c;
  c.Take(2 * s.n_pad);  // parameters
  s.deltas_offset = c.Take(2 * s.n_pad + Model::kControlWords);
  for (LinearSlot& l : s.linears) l.derived_offset = c.Take(2 * l.weights());
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

absl::Status AllocateBatchArena(CudaEngineState& s, size_t max_batch) {
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.s()));  // nothing may use the old ones
  Carver c;
  size_t widest = 0;
  for (BoundarySlot& b : s.bounds) {
    b.mu = c.Take(max_batch * b.width);
    b.var = c.Take(max_batch * b.width);
    if (b.has_jcb) b.jcb = c.Take(max_batch * b.width);
    widest = std::max(widest, b.width);
  }
  for (LinearSlot& l : s.linears) l.in_mu_sq_offset = c.Take(max_batch * l.in);
  s.delta_stride = RoundUp(max_batch * widest);
  s.delta_a = c.Take(2 * s.delta_stride);
  s.delta_b = c.Take(2 * s.delta_stride);
  s.out_stride = RoundUp(max_batch * s.output_width());
  s.delta_out = c.Take(2 * s.out_stride);
  s.labels_offset = c.Take(max_batch);
  s.targets_offset = c.Take(max_batch * s.output_width());
  s.batch = DeviceFloats();  // free the old arena before taking the new one
  s.host_out = PinnedFloats();
  s.staging = PinnedFloats();
  s.max_batch = 0;
  TAGI_ASSIGN_OR_RETURN(s.batch, DeviceFloats::Allocate(c.size()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s.batch.get(), 0, c.size() * sizeof(float), s.s()));
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

// Brings the delta arena to the CPU engine's meaning (weights times var_w,
// everything times pending_scale): before the deltas leave in the CPU
// layout, or are summed with deltas that have.
absl::Status CanonicaliseDeltas(CudaEngineState& s) {
  if (!s.weights_scaled) {
    for (const LinearSlot& l : s.linears) {
      const Slices p = SlicesOf(s.params(), s.n_pad, l);
      const Slices d = SlicesOf(s.deltas(), s.n_pad, l);
      TAGI_CUDA_RETURN_IF_ERROR(
          kernels::ScaleWeightDeltas(p.w_var, l.weights(), d.w_mu, d.w_var, s.s()));
    }
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
  for (const LinearSlot& l : s.linears) {
    const Slices p = SlicesOf(s.params(), s.n_pad, l);
    float* derived = s.model.get() + l.derived_offset;
    TAGI_CUDA_RETURN_IF_ERROR(kernels::RefreshDerived(p.w_mu, p.w_var, l.weights(), derived,
                                                      derived + l.weights(), s.s()));
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
                                                               size_t max_batch, int device) {
  TAGI_RETURN_IF_ERROR(ValidateArchitecture(arch));
  TAGI_RETURN_IF_ERROR(CheckDevice(device));
  TAGI_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  auto s = std::make_unique<CudaEngineState>();
  s->arch = arch;
  s->device = device;
  TAGI_RETURN_IF_ERROR(BuildSlots(*s));
  TAGI_ASSIGN_OR_RETURN(s->stream, Stream::Create());
  TAGI_ASSIGN_OR_RETURN(s->blas, CublasHandle::Create(s->stream.get()));
  TAGI_ASSIGN_OR_RETURN(s->uploaded, Event::Create());
  TAGI_ASSIGN_OR_RETURN(s->output_ready, Event::Create());
  TAGI_ASSIGN_OR_RETURN(s->control, PinnedFloats::Allocate(Model::kControlWords));
  TAGI_RETURN_IF_ERROR(AllocateModelArena(*s));
  TAGI_RETURN_IF_ERROR(AllocateBatchArena(*s, std::max<size_t>(max_batch, 1)));
  // Record once so that the first upload's wait has an event to wait on.
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(s->uploaded.get(), s->stream.get()));
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(s)));
}

int CudaEngine::ordinal() const { return s_->device; }
const Architecture& CudaEngine::architecture() const { return s_->arch; }
std::string CudaEngine::device() const { return absl::StrCat("cuda:", s_->device); }

absl::Status CudaEngine::Reserve(size_t max_batch) {
  if (max_batch <= s_->max_batch) return absl::OkStatus();
  TAGI_USE_DEVICE();
  return AllocateBatchArena(*s_, max_batch);
}

absl::Status CudaEngine::Initialize(uint64_t seed, const InitOptions& options) {
  // The CPU Model draws the parameters: the same seed gives the same bits
  // on every device.
  TAGI_ASSIGN_OR_RETURN(auto cpu, Model::Create(s_->arch, 1));
  cpu->Initialize(seed, options);
  std::span<const float> p = cpu->parameters();
  return WriteParameters(p);
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

absl::Status CudaEngine::ReadDeltas(std::span<float> out) {
  TAGI_RETURN_IF_ERROR(CheckArenaSpan("ReadDeltas", out.size(), s_->n));
  TAGI_USE_DEVICE();
  TAGI_RETURN_IF_ERROR(CopyArena(*s_, s_->deltas(), out.data(), cudaMemcpyDeviceToHost));
  if (s_->weights_scaled && s_->pending_scale == 1.0f) return absl::OkStatus();
  // The factors still pending, applied on the host in the kernels' order,
  // leaving the arena as it is, so that the next ApplyStep still applies
  // them itself (this copy is for tests and diagnostics; training never
  // reads it).
  std::vector<float> params;
  if (!s_->weights_scaled) {
    params.resize(2 * s_->n);
    TAGI_RETURN_IF_ERROR(CopyArena(*s_, s_->params(), params.data(), cudaMemcpyDeviceToHost));
  }
  const size_t n = s_->n;
  const float scale = s_->pending_scale;
  for (const LinearSlot& l : s_->linears) {
    for (size_t i = l.offset; i < l.offset + l.weights() + l.out; ++i) {
      float d_mu = out[i];
      float d_var = out[n + i];
      if (!s_->weights_scaled && i < l.offset + l.weights()) {
        const float vs = params[n + i];
        d_mu *= vs;
        d_var *= vs * vs;
      }
      out[i] = d_mu * scale;
      out[n + i] = d_var * scale;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> CudaEngine::ParameterFingerprint() {
  std::vector<float> host(2 * s_->n);
  TAGI_RETURN_IF_ERROR(ReadParameters(host));
  return Fingerprint64(host.data(), host.size() * sizeof(float));
}

absl::Status CudaEngine::Upload(const float* x, const int32_t* labels, const float* targets,
                                size_t batch) {
  CudaEngineState& s = *s_;
  TAGI_RETURN_IF_ERROR(Reserve(batch));
  // The previous batch must have left the staging buffer before it is reused.
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.uploaded.get()));
  const size_t nx = batch * s.input_width();
  const size_t ny = batch * s.output_width();
  float* stage_x = s.staging.get();
  float* stage_y = stage_x + s.max_batch * s.input_width();
  float* stage_labels = stage_y + s.max_batch * s.output_width();
  std::memcpy(stage_x, x, nx * sizeof(float));
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.at(s.bounds.front().mu), stage_x, nx * sizeof(float),
                                            cudaMemcpyHostToDevice, s.s()));
  if (labels != nullptr) {
    std::memcpy(stage_labels, labels, batch * sizeof(int32_t));
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.at(s.labels_offset), stage_labels,
                                              batch * sizeof(int32_t), cudaMemcpyHostToDevice,
                                              s.s()));
  }
  if (targets != nullptr) {
    std::memcpy(stage_y, targets, ny * sizeof(float));
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.at(s.targets_offset), stage_y, ny * sizeof(float),
                                              cudaMemcpyHostToDevice, s.s()));
  }
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.uploaded.get(), s.s()));
  return absl::OkStatus();
}

absl::Status CudaEngine::RunForward(size_t batch) {
  CudaEngineState& s = *s_;
  const CublasHandle& h = s.blas;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const BoundarySlot& in = s.bounds[i];
    const BoundarySlot& out = s.bounds[i + 1];
    const LayerSlot& layer = s.layers[i];
    if (layer.linear < 0) {
      TAGI_CUDA_RETURN_IF_ERROR(kernels::ActivationForward(
          static_cast<int>(layer.kind), layer.slope, s.at(in.mu), s.at(in.var), batch * in.width,
          s.at(out.mu), s.at(out.var), s.at(out.jcb), s.s()));
      continue;
    }
    const LinearSlot& l = s.linears[static_cast<size_t>(layer.linear)];
    const Slices p = SlicesOf(s.params(), s.n_pad, l);
    const float* w_second = s.model.get() + l.derived_offset + l.weights();
    float* sq = s.at(l.in_mu_sq_offset);
    float* mu_z = s.at(out.mu);
    float* var_z = s.at(out.var);
    // Start from the biases, then accumulate the products (beta = 1).
    TAGI_CUDA_RETURN_IF_ERROR(
        kernels::BroadcastBias(p.b_mu, p.b_var, batch, l.out, mu_z, var_z, s.s()));
    TAGI_CUDA_RETURN_IF_ERROR(kernels::Square(s.at(in.mu), batch * l.in, sq, s.s()));
    // mu_z = mu_a mu_w^T + mu_b
    TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kNo, Trans::kYes, batch, l.out, l.in, s.at(in.mu), l.in,
                              p.w_mu, l.in, 1.0f, mu_z, l.out));
    // var_z = var_a (mu_w^2 + var_w)^T + mu_a^2 var_w^T + var_b
    if (!l.input_variance_zero) {
      TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kNo, Trans::kYes, batch, l.out, l.in, s.at(in.var), l.in,
                                w_second, l.in, 1.0f, var_z, l.out));
    }
    TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kNo, Trans::kYes, batch, l.out, l.in, sq, l.in, p.w_var,
                              l.in, 1.0f, var_z, l.out));
  }
  // The output units go to the host while the rest of the step runs.
  const BoundarySlot& last = s.bounds.back();
  const size_t bytes = batch * last.width * sizeof(float);
  TAGI_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(s.host_out.get(), s.at(last.mu), bytes, cudaMemcpyDeviceToHost, s.s()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.host_out.get() + s.out_stride, s.at(last.var), bytes,
                                            cudaMemcpyDeviceToHost, s.s()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.output_ready.get(), s.s()));
  s.output_pending = true;
  return absl::OkStatus();
}

absl::Status CudaEngine::OutputUpdate(size_t batch, float sigma_v, bool classification) {
  CudaEngineState& s = *s_;
  const BoundarySlot& last = s.bounds.back();
  const float var_v = sigma_v * sigma_v;
  float* dmu = s.at(s.delta_out);
  float* dvar = dmu + s.out_stride;
  const size_t n = batch * last.width;
  if (classification) {
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dmu, 0, n * sizeof(float), s.s()));
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dvar, 0, n * sizeof(float), s.s()));
    const auto* labels = reinterpret_cast<const int32_t*>(s.at(s.labels_offset));
    const auto* nodes = reinterpret_cast<const int32_t*>(s.model.get() + s.hsm_nodes_offset);
    TAGI_CUDA_RETURN_IF_ERROR(kernels::HsmDeltas(
        s.at(last.mu), s.at(last.var), batch, last.width, labels, nodes,
        s.model.get() + s.hsm_targets_offset, s.tree->levels(), var_v, dmu, dvar, s.s()));
  } else {
    TAGI_CUDA_RETURN_IF_ERROR(kernels::RegressionDeltas(
        s.at(last.mu), s.at(last.var), s.at(s.targets_offset), n, var_v, dmu, dvar, s.s()));
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::RunBackward(size_t batch) {
  CudaEngineState& s = *s_;
  const CublasHandle& h = s.blas;
  // Innovations of boundary i + 1 (cur) give those of boundary i (next).
  size_t cur = s.delta_out;
  size_t cur_stride = s.out_stride;
  size_t next = s.delta_a;
  for (size_t i = s.layers.size(); i-- > 0;) {
    const bool need_input = i > 0;
    const BoundarySlot& in = s.bounds[i];
    const BoundarySlot& out = s.bounds[i + 1];
    const LayerSlot& layer = s.layers[i];
    const float* dmu = s.at(cur);
    const float* dvar = s.at(cur + cur_stride);
    float* dmu_in = s.at(next);
    float* dvar_in = s.at(next + s.delta_stride);
    if (layer.linear < 0) {
      if (need_input) {
        TAGI_CUDA_RETURN_IF_ERROR(kernels::ActivationBackward(
            s.at(out.jcb), dmu, dvar, batch * out.width, dmu_in, dvar_in, s.s()));
      }
    } else {
      const LinearSlot& l = s.linears[static_cast<size_t>(layer.linear)];
      const Slices p = SlicesOf(s.params(), s.n_pad, l);
      const Slices d = SlicesOf(s.deltas(), s.n_pad, l);
      const float* mu_w_sq = s.model.get() + l.derived_offset;
      // Parameter deltas, summed over the batch against the same prior:
      // delta_mu_w = var_w * (dmu^T mu_a), delta_var_w = var_w^2 * (dvar^T mu_a^2).
      // The products leave out var_w: the capped step applies it (or
      // ScaleWeights, before deltas leave the device in the CPU layout).
      TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kYes, Trans::kNo, l.out, l.in, batch, dmu, l.out,
                                s.at(in.mu), l.in, 0.0f, d.w_mu, l.in));
      TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kYes, Trans::kNo, l.out, l.in, batch, dvar, l.out,
                                s.at(l.in_mu_sq_offset), l.in, 0.0f, d.w_var, l.in));
      TAGI_CUDA_RETURN_IF_ERROR(
          kernels::BiasDeltas(dmu, dvar, batch, l.out, p.b_var, d.b_mu, d.b_var, s.s()));
      if (need_input) {
        // delta_mu_a = dmu mu_w, delta_var_a = dvar mu_w^2.
        TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kNo, Trans::kNo, batch, l.in, l.out, dmu, l.out, p.w_mu,
                                  l.in, 0.0f, dmu_in, l.in));
        TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kNo, Trans::kNo, batch, l.in, l.out, dvar, l.out,
                                  mu_w_sq, l.in, 0.0f, dvar_in, l.in));
      }
    }
    cur = next;
    cur_stride = s.delta_stride;
    next = next == s.delta_a ? s.delta_b : s.delta_a;
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
  return RunForward(batch);
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
  if (!s_->tree) {
    return absl::FailedPreconditionError("ClassProbabilities: the model is not a classifier");
  }
  TAGI_ASSIGN_OR_RETURN(const ConstGaussianView out, Output(batch));
  HsmClassProbabilities(*s_->tree, out, batch, probs, s_->node_scratch.data());
  return absl::OkStatus();
}

absl::Status CudaEngine::TrainStep(const float* x, const int32_t* labels, const float* targets,
                                   size_t batch, float sigma_v) {
  TAGI_USE_DEVICE();
  const bool classification = s_->tree.has_value();
  if (classification ? labels == nullptr : targets == nullptr) {
    return absl::InvalidArgumentError(classification ? "TrainStep: a classifier needs labels"
                                                     : "TrainStep: regression needs targets");
  }
  TAGI_RETURN_IF_ERROR(
      Upload(x, classification ? labels : nullptr, classification ? nullptr : targets, batch));
  TAGI_RETURN_IF_ERROR(RunForward(batch));
  TAGI_RETURN_IF_ERROR(OutputUpdate(batch, sigma_v, classification));
  return RunBackward(batch);
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
    s.control.get()[0] = control;
    float* buffer = s.deltas();
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buffer + 2 * s.n_pad, s.control.get(), sizeof(float),
                                              cudaMemcpyHostToDevice, s.s()));
    TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.s()));
    s.reduce = ReduceMode::kDevice;
    return std::span<float>(buffer, 2 * s.n_pad + Model::kControlWords);
  }
  // Host staging in the packed CPU layout and meaning, so CPU ranks can
  // join the sum.
  TAGI_RETURN_IF_ERROR(CanonicaliseDeltas(s));
  const size_t size = 2 * s.n + Model::kControlWords;
  if (s.reduce_host.size() < size) {
    TAGI_ASSIGN_OR_RETURN(s.reduce_host, PinnedFloats::Allocate(size));
  }
  TAGI_RETURN_IF_ERROR(CopyArena(s, s.deltas(), s.reduce_host.get(), cudaMemcpyDeviceToHost));
  s.reduce_host.get()[2 * s.n] = control;
  s.reduce = ReduceMode::kHost;
  return std::span<float>(s.reduce_host.get(), size);
}

absl::StatusOr<float> CudaEngine::EndReduce(float scale) {
  CudaEngineState& s = *s_;
  TAGI_USE_DEVICE();
  const ReduceMode mode = s.reduce;
  s.reduce = ReduceMode::kNone;
  float control = 0.0f;
  if (mode == ReduceMode::kDevice) {
    TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.control.get(), s.deltas() + 2 * s.n_pad,
                                              sizeof(float), cudaMemcpyDeviceToHost, s.s()));
  } else if (mode == ReduceMode::kHost) {
    control = s.reduce_host.get()[2 * s.n];
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
  for (const LinearSlot& l : s.linears) {
    const Slices p = SlicesOf(s.params(), s.n_pad, l);
    const Slices d = SlicesOf(s.deltas(), s.n_pad, l);
    float* derived = s.model.get() + l.derived_offset;
    // Weights, fused with their pending var_w factor, the reduction's scale
    // and the refresh of mu_w^2 and mu_w^2 + var_w; biases (their var_b
    // factor is applied in the backward pass) with the scale.
    TAGI_CUDA_RETURN_IF_ERROR(kernels::CappedStep(
        inv_cap, kVarianceFloor, l.weights(), p.w_mu, p.w_var, d.w_mu, d.w_var,
        s.weights_scaled ? nullptr : p.w_var, s.pending_scale, derived, derived + l.weights(),
        s.s()));
    TAGI_CUDA_RETURN_IF_ERROR(kernels::CappedStep(inv_cap, kVarianceFloor, l.out, p.b_mu, p.b_var,
                                                  d.b_mu, d.b_var, nullptr, s.pending_scale,
                                                  nullptr, nullptr, s.s()));
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
  const float* dmu = s_->at(s_->delta_out);
  TAGI_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(delta_mu.data(), dmu, n * sizeof(float), cudaMemcpyDeviceToHost, s_->s()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(delta_var.data(), dmu + s_->out_stride,
                                            n * sizeof(float), cudaMemcpyDeviceToHost, s_->s()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s_->s()));
  return absl::OkStatus();
}

}  // namespace tagi::engine::cuda
