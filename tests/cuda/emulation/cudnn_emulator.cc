// The emulated cuDNN of cudnn.h: descriptors are plain structs, the
// convolutions loops over one sample's im2col columns at a time.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "cudnn.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  int pad = -1, stride = 0;
  bool cross_correlation = false;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace {

using tagi::cuda_emulation::Enqueue;
using tagi::cuda_emulation::InDeviceMemory;

cudnnStatus_t Refuse(const char* what) {
  std::fprintf(stderr, "cudnn emulation: %s\n", what);
  return CUDNN_STATUS_BAD_PARAM;
}

// One convolution's geometry, checked.
struct Geometry {
  int n = 0, c = 0, h = 0, w = 0;  // input
  int k = 0, r = 0;                // filters, kernel
  int ho = 0, wo = 0;              // output
  int pad = 0, stride = 1;
  size_t rows() const { return static_cast<size_t>(c) * r * r; }
  size_t positions() const { return static_cast<size_t>(ho) * wo; }
  size_t columns_bytes() const { return rows() * positions() * sizeof(float); }
  size_t x_floats() const { return static_cast<size_t>(n) * c * h * w; }
  size_t y_floats() const { return static_cast<size_t>(n) * k * ho * wo; }
  size_t w_floats() const { return static_cast<size_t>(k) * rows(); }
};

bool Describe(const cudnnTensorStruct* x, const cudnnFilterStruct* f,
              const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y, Geometry* g) {
  if (x == nullptr || f == nullptr || conv == nullptr || y == nullptr) return false;
  if (x->n <= 0 || f->k <= 0 || conv->pad < 0 || conv->stride <= 0) return false;
  if (!conv->cross_correlation || f->h != f->w || f->c != x->c) return false;
  *g = {x->n, x->c, x->h, x->w, f->k, f->h, 0, 0, conv->pad, conv->stride};
  const int span_h = x->h + 2 * conv->pad - f->h;
  const int span_w = x->w + 2 * conv->pad - f->h;
  if (span_h < 0 || span_w < 0) return false;
  g->ho = span_h / conv->stride + 1;
  g->wo = span_w / conv->stride + 1;
  return y->n == x->n && y->c == f->k && y->h == g->ho && y->w == g->wo;
}

// col[(ci r + i) r + j][yo wo + xo] = x[ci][yo s + i - p][xo s + j - p], 0 in the padding.
void Im2Col(const Geometry& g, const float* x, float* col) {
  for (int ci = 0; ci < g.c; ++ci) {
    for (int i = 0; i < g.r; ++i) {
      for (int j = 0; j < g.r; ++j) {
        float* row = col + ((static_cast<size_t>(ci) * g.r + i) * g.r + j) * g.positions();
        for (int yo = 0; yo < g.ho; ++yo) {
          for (int xo = 0; xo < g.wo; ++xo) {
            const int yi = yo * g.stride + i - g.pad;
            const int xi = xo * g.stride + j - g.pad;
            const bool inside = yi >= 0 && yi < g.h && xi >= 0 && xi < g.w;
            row[yo * g.wo + xo] =
                inside ? x[(static_cast<size_t>(ci) * g.h + yi) * g.w + xi] : 0.0f;
          }
        }
      }
    }
  }
}

void Col2Im(const Geometry& g, const float* col, float* x) {
  std::fill(x, x + static_cast<size_t>(g.c) * g.h * g.w, 0.0f);
  for (int ci = 0; ci < g.c; ++ci) {
    for (int i = 0; i < g.r; ++i) {
      for (int j = 0; j < g.r; ++j) {
        const float* row = col + ((static_cast<size_t>(ci) * g.r + i) * g.r + j) * g.positions();
        for (int yo = 0; yo < g.ho; ++yo) {
          for (int xo = 0; xo < g.wo; ++xo) {
            const int yi = yo * g.stride + i - g.pad;
            const int xi = xo * g.stride + j - g.pad;
            if (yi >= 0 && yi < g.h && xi >= 0 && xi < g.w) {
              x[(static_cast<size_t>(ci) * g.h + yi) * g.w + xi] += row[yo * g.wo + xo];
            }
          }
        }
      }
    }
  }
}

// Checks an execution call's operands and workspace; `need` is what its
// algorithm needs.
cudnnStatus_t CheckCall(cudnnHandle_t handle, const cudnnConvolutionStruct* conv,
                        const Geometry& g, const void* x, const void* w, const void* y,
                        void* workspace, size_t workspace_bytes, size_t need) {
  if (handle == nullptr) return CUDNN_STATUS_NOT_INITIALIZED;
  if (conv->math != CUDNN_FMA_MATH) return Refuse("the convolution's math type is not FMA");
  if (!InDeviceMemory(x, g.x_floats() * sizeof(float)) ||
      !InDeviceMemory(w, g.w_floats() * sizeof(float)) ||
      !InDeviceMemory(y, g.y_floats() * sizeof(float))) {
    return Refuse("an operand leaves its device allocation");
  }
  if (need > 0 && (workspace_bytes < need || !InDeviceMemory(workspace, need))) {
    return Refuse("the workspace is too small or not device memory");
  }
  return CUDNN_STATUS_SUCCESS;
}

// Columns go to the device workspace when the algorithm has one, else to
// a host buffer of the call's own.
float* Columns(void* workspace, size_t need, std::vector<float>& own, const Geometry& g) {
  if (need > 0) return static_cast<float*>(workspace);
  own.resize(g.rows() * g.positions());
  return own.data();
}

template <typename Perf>
void Propose(std::initializer_list<Perf> list, int requested, int* returned, Perf* perf) {
  int i = 0;
  for (const Perf& p : list) {
    if (i == requested) break;
    perf[i++] = p;
  }
  *returned = i;
}

}  // namespace

size_t cudnnGetVersion() { return CUDNN_MAJOR * 10000 + 100; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
  }
  return "CUDNN_STATUS_UNKNOWN";
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  *handle = new cudnnContext();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) {
  *desc = new cudnnTensorStruct();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT || n <= 0 || c <= 0 || h <= 0 ||
      w <= 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *desc = {n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) {
  *desc = new cudnnFilterStruct();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT || k <= 0 || c <= 0 || h <= 0 ||
      w <= 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *desc = {k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) {
  *desc = new cudnnConvolutionStruct();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (pad_h != pad_w || u != v || pad_h < 0 || u <= 0 || compute != CUDNN_DATA_FLOAT) {
    return Refuse("only square fp32 convolutions are emulated");
  }
  if (dilation_h != 1 || dilation_w != 1) return Refuse("dilation is not emulated");
  desc->pad = pad_h;
  desc->stride = u;
  desc->cross_correlation = mode == CUDNN_CROSS_CORRELATION;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t math) {
  desc->math = math;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y, const int requested,
    int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
  Geometry g;
  if (!Describe(x, w, conv, y, &g)) return CUDNN_STATUS_BAD_PARAM;
  Propose<cudnnConvolutionFwdAlgoPerf_t>(
      {{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, 0.1f, 0,
        CUDNN_DETERMINISTIC, CUDNN_TENSOR_OP_MATH, {}},
       {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_STATUS_SUCCESS, 0.2f, g.columns_bytes(),
        CUDNN_DETERMINISTIC, CUDNN_FMA_MATH, {}},
       {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_STATUS_SUCCESS, 0.3f, 0,
        CUDNN_DETERMINISTIC, CUDNN_FMA_MATH, {}}},
      requested, returned, perf);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t,
                                                      const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t conv,
                                                      const cudnnTensorDescriptor_t y,
                                                      cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* bytes) {
  Geometry g;
  if (!Describe(x, w, conv, y, &g)) return CUDNN_STATUS_BAD_PARAM;
  *bytes = algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM ? g.columns_bytes() : 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t x_desc, const void* x,
                                      const cudnnFilterDescriptor_t w_desc, const void* w,
                                      const cudnnConvolutionDescriptor_t conv,
                                      cudnnConvolutionFwdAlgo_t algo, void* workspace,
                                      size_t workspace_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t y_desc, void* y) {
  Geometry g;
  if (!Describe(x_desc, w_desc, conv, y_desc, &g)) return CUDNN_STATUS_BAD_PARAM;
  if (algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) {
    return Refuse("forward with a tensor-core algorithm");
  }
  const size_t need = algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM ? g.columns_bytes() : 0;
  const cudnnStatus_t st = CheckCall(handle, conv, g, x, w, y, workspace, workspace_bytes, need);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  const float al = *static_cast<const float*>(alpha);
  const float be = *static_cast<const float*>(beta);
  const auto* xs = static_cast<const float*>(x);
  const auto* ws = static_cast<const float*>(w);
  auto* ys = static_cast<float*>(y);
  Enqueue(handle->stream, [=] {
    std::vector<float> own;
    float* col = Columns(workspace, need, own, g);
    const size_t p = g.positions();
    for (int s = 0; s < g.n; ++s) {
      Im2Col(g, xs + static_cast<size_t>(s) * g.c * g.h * g.w, col);
      for (int k = 0; k < g.k; ++k) {
        float* out = ys + (static_cast<size_t>(s) * g.k + k) * p;
        for (size_t q = 0; q < p; ++q) {
          float acc = 0.0f;
          for (size_t r = 0; r < g.rows(); ++r) acc += ws[k * g.rows() + r] * col[r * p + q];
          out[q] = be == 0.0f ? al * acc : al * acc + be * out[q];
        }
      }
    }
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx, const int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  Geometry g;
  if (!Describe(dx, w, conv, dy, &g)) return CUDNN_STATUS_BAD_PARAM;
  Propose<cudnnConvolutionBwdDataAlgoPerf_t>(
      {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_STATUS_SUCCESS, 0.1f, 0, CUDNN_NON_DETERMINISTIC,
        CUDNN_FMA_MATH, {}},
       {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_STATUS_SUCCESS, 0.2f, g.columns_bytes(),
        CUDNN_DETERMINISTIC, CUDNN_FMA_MATH, {}}},
      requested, returned, perf);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx,
    cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
  Geometry g;
  if (!Describe(dx, w, conv, dy, &g)) return CUDNN_STATUS_BAD_PARAM;
  *bytes = algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 ? g.columns_bytes() : 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t w_desc, const void* w,
                                           const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workspace,
                                           size_t workspace_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dx_desc, void* dx) {
  Geometry g;
  if (!Describe(dx_desc, w_desc, conv, dy_desc, &g)) return CUDNN_STATUS_BAD_PARAM;
  if (algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_1) {
    return Refuse("backward-data with a non-deterministic algorithm");
  }
  const cudnnStatus_t st =
      CheckCall(handle, conv, g, dx, w, dy, workspace, workspace_bytes, g.columns_bytes());
  if (st != CUDNN_STATUS_SUCCESS) return st;
  if (*static_cast<const float*>(alpha) != 1.0f || *static_cast<const float*>(beta) != 0.0f) {
    return Refuse("backward-data is emulated for alpha 1, beta 0 only");
  }
  const auto* ws = static_cast<const float*>(w);
  const auto* dys = static_cast<const float*>(dy);
  auto* dxs = static_cast<float*>(dx);
  Enqueue(handle->stream, [=] {
    auto* col = static_cast<float*>(workspace);
    const size_t p = g.positions();
    for (int s = 0; s < g.n; ++s) {
      const float* d = dys + static_cast<size_t>(s) * g.k * p;
      for (size_t r = 0; r < g.rows(); ++r) {
        for (size_t q = 0; q < p; ++q) {
          float acc = 0.0f;
          for (int k = 0; k < g.k; ++k) acc += ws[k * g.rows() + r] * d[k * p + q];
          col[r * p + q] = acc;
        }
      }
      Col2Im(g, col, dxs + static_cast<size_t>(s) * g.c * g.h * g.w);
    }
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw,
    const int requested, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  Geometry g;
  if (!Describe(x, dw, conv, dy, &g)) return CUDNN_STATUS_BAD_PARAM;
  Propose<cudnnConvolutionBwdFilterAlgoPerf_t>(
      {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_STATUS_SUCCESS, 0.1f, 0,
        CUDNN_NON_DETERMINISTIC, CUDNN_FMA_MATH, {}},
       {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, CUDNN_STATUS_SUCCESS, 0.15f, 0, CUDNN_DETERMINISTIC,
        CUDNN_TENSOR_OP_MATH, {}},
       {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_STATUS_SUCCESS, 0.2f, g.columns_bytes(),
        CUDNN_DETERMINISTIC, CUDNN_FMA_MATH, {}}},
      requested, returned, perf);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
  Geometry g;
  if (!Describe(x, dw, conv, dy, &g)) return CUDNN_STATUS_BAD_PARAM;
  *bytes = algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ? g.columns_bytes() : 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t x_desc, const void* x,
                                             const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t dw_desc, void* dw) {
  Geometry g;
  if (!Describe(x_desc, dw_desc, conv, dy_desc, &g)) return CUDNN_STATUS_BAD_PARAM;
  if (algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1) {
    return Refuse("backward-filter with a non-deterministic or tensor-core algorithm");
  }
  const cudnnStatus_t st =
      CheckCall(handle, conv, g, x, dw, dy, workspace, workspace_bytes, g.columns_bytes());
  if (st != CUDNN_STATUS_SUCCESS) return st;
  if (*static_cast<const float*>(alpha) != 1.0f || *static_cast<const float*>(beta) != 0.0f) {
    return Refuse("backward-filter is emulated for alpha 1, beta 0 only");
  }
  const auto* xs = static_cast<const float*>(x);
  const auto* dys = static_cast<const float*>(dy);
  auto* dws = static_cast<float*>(dw);
  Enqueue(handle->stream, [=] {
    auto* col = static_cast<float*>(workspace);
    const size_t p = g.positions();
    std::vector<float> acc(g.w_floats(), 0.0f);
    for (int s = 0; s < g.n; ++s) {
      Im2Col(g, xs + static_cast<size_t>(s) * g.c * g.h * g.w, col);
      const float* d = dys + static_cast<size_t>(s) * g.k * p;
      for (int k = 0; k < g.k; ++k) {
        for (size_t r = 0; r < g.rows(); ++r) {
          float sum = 0.0f;
          for (size_t q = 0; q < p; ++q) sum += d[k * p + q] * col[r * p + q];
          acc[k * g.rows() + r] += sum;
        }
      }
    }
    std::copy(acc.begin(), acc.end(), dws);
  });
  return CUDNN_STATUS_SUCCESS;
}
