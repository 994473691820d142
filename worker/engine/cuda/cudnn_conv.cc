#include "worker/engine/cuda/cudnn_conv.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tagi::engine::cuda {
namespace {

// How many of cuDNN's proposals are looked at (it has at most 8 per call).
constexpr int kProposals = 8;

// The first proposal that ran, is deterministic, is not a tensor-core
// (TF32) one and fits `limit` bytes; NotFound naming `what` otherwise.
template <typename Perf>
absl::StatusOr<Perf> Choose(const Perf* perf, int count, size_t limit, const char* what) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC) continue;
    if (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) {
      continue;
    }
    if (p.memory > limit) continue;
    return p;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "cuDNN proposes no deterministic fp32 ", what, " algorithm within ", limit,
      " bytes of workspace"));
}

}  // namespace

absl::Status CudnnStatus(const CudnnApi& api, cudnnStatus_t st, const char* expr) {
  const std::string message = absl::StrCat(expr, ": ", api.error_string(st));
  if (st == CUDNN_STATUS_BAD_PARAM || st == CUDNN_STATUS_NOT_SUPPORTED) {
    return absl::InvalidArgumentError(message);
  }
  return absl::InternalError(message);
}

CudnnHandle& CudnnHandle::operator=(CudnnHandle&& o) noexcept {
  std::swap(h_, o.h_);
  std::swap(api_, o.api_);
  return *this;
}

CudnnHandle::~CudnnHandle() {
  if (h_ != nullptr) api_->destroy(h_);
}

absl::StatusOr<CudnnHandle> CudnnHandle::Create(cudaStream_t stream) {
  absl::StatusOr<const CudnnApi*> api = Cudnn();
  if (!api.ok()) return api.status();
  CudnnHandle h;
  h.api_ = *api;
  TAGI_CUDNN_RETURN_IF_ERROR(*h.api_, h.api_->create(&h.h_));
  TAGI_CUDNN_RETURN_IF_ERROR(*h.api_, h.api_->set_stream(h.h_, stream));
  return h;
}

CudnnConvolution::~CudnnConvolution() {
  const CudnnApi& api = handle_.api();
  if (x_ != nullptr) api.destroy_tensor(x_);
  if (y_ != nullptr) api.destroy_tensor(y_);
  if (w_ != nullptr) api.destroy_filter(w_);
  if (conv_ != nullptr) api.destroy_conv(conv_);
}

absl::StatusOr<std::unique_ptr<CudnnConvolution>> CudnnConvolution::Create(
    const CudnnHandle& handle, const ConvShape& s) {
  const CudnnApi& api = handle.api();
  std::unique_ptr<CudnnConvolution> c(new CudnnConvolution(handle, s));
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.create_tensor(&c->x_));
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.create_tensor(&c->y_));
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.create_filter(&c->w_));
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.create_conv(&c->conv_));
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.set_filter(c->w_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                 s.out_channels, s.channels, s.kernel, s.kernel));
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.set_conv(c->conv_, s.pad, s.pad, s.stride, s.stride, 1, 1,
                                               CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.set_conv_math(c->conv_, CUDNN_FMA_MATH));
  return c;
}

absl::StatusOr<size_t> CudnnConvolution::Prepare(size_t batch, size_t workspace_limit) {
  if (batch == batch_) return workspace_;
  const CudnnApi& api = handle_.api();
  const ConvShape& s = shape_;
  const int n = static_cast<int>(batch);
  const int out_h = (s.height + 2 * s.pad - s.kernel) / s.stride + 1;
  const int out_w = (s.width + 2 * s.pad - s.kernel) / s.stride + 1;
  batch_ = 0;  // undescribed until every call below succeeded
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.set_tensor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n,
                                                 s.channels, s.height, s.width));
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.set_tensor(y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n,
                                                 s.out_channels, out_h, out_w));
  const cudnnHandle_t h = handle_.get();
  int count = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kProposals];
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.forward_algos(h, x_, w_, conv_, y_, kProposals, &count, fwd));
  absl::StatusOr<cudnnConvolutionFwdAlgoPerf_t> f = Choose(fwd, count, workspace_limit, "forward");
  if (!f.ok()) return f.status();
  cudnnConvolutionBwdDataAlgoPerf_t data[kProposals];
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.data_algos(h, w_, y_, conv_, x_, kProposals, &count, data));
  absl::StatusOr<cudnnConvolutionBwdDataAlgoPerf_t> d =
      Choose(data, count, workspace_limit, "backward-data");
  if (!d.ok()) return d.status();
  cudnnConvolutionBwdFilterAlgoPerf_t filter[kProposals];
  TAGI_CUDNN_RETURN_IF_ERROR(api,
                             api.filter_algos(h, x_, y_, conv_, w_, kProposals, &count, filter));
  absl::StatusOr<cudnnConvolutionBwdFilterAlgoPerf_t> w =
      Choose(filter, count, workspace_limit, "backward-filter");
  if (!w.ok()) return w.status();
  forward_ = f->algo;
  data_ = d->algo;
  filter_ = w->algo;
  // The heuristics' memory is an estimate; the size functions are the rule.
  size_t need = 0;
  size_t bytes = 0;
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.forward_workspace(h, x_, w_, conv_, y_, forward_, &bytes));
  need = std::max(need, bytes);
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.data_workspace(h, w_, y_, conv_, x_, data_, &bytes));
  need = std::max(need, bytes);
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.filter_workspace(h, x_, y_, conv_, w_, filter_, &bytes));
  need = std::max(need, bytes);
  if (need > workspace_limit) {
    return absl::ResourceExhaustedError(absl::StrCat("cuDNN's algorithms need ", need,
                                                     " bytes of workspace, more than the ",
                                                     workspace_limit, " reserved"));
  }
  workspace_ = need;
  batch_ = batch;
  return need;
}

absl::Status CudnnConvolution::Forward(const float* x, const float* w, float beta, float* y,
                                       void* workspace, size_t workspace_bytes) {
  const CudnnApi& api = handle_.api();
  const float one = 1.0f;
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.forward(handle_.get(), &one, x_, x, w_, w, conv_, forward_,
                                              workspace, workspace_bytes, &beta, y_, y));
  return absl::OkStatus();
}

absl::Status CudnnConvolution::BackwardData(const float* w, const float* dy, float* dx,
                                            void* workspace, size_t workspace_bytes) {
  const CudnnApi& api = handle_.api();
  const float one = 1.0f;
  const float zero = 0.0f;
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.backward_data(handle_.get(), &one, w_, w, y_, dy, conv_,
                                                    data_, workspace, workspace_bytes, &zero, x_,
                                                    dx));
  return absl::OkStatus();
}

absl::Status CudnnConvolution::BackwardFilter(const float* x, const float* dy, float* dw,
                                              void* workspace, size_t workspace_bytes) {
  const CudnnApi& api = handle_.api();
  const float one = 1.0f;
  const float zero = 0.0f;
  TAGI_CUDNN_RETURN_IF_ERROR(api, api.backward_filter(handle_.get(), &one, x_, x, y_, dy, conv_,
                                                      filter_, workspace, workspace_bytes, &zero,
                                                      w_, dw));
  return absl::OkStatus();
}

}  // namespace tagi::engine::cuda
