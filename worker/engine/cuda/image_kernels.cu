// Kernels of image_kernels.h. Grid-stride loops, one output element (or one
// group's part of a sum) per thread step; each mirrors its CPU layer
// (pool.cc, norm.cc, conv2d.cc) operation for operation where the order of
// float arithmetic allows, so that the two engines agree to fp32 rounding.
#include "worker/engine/cuda/image_kernels.h"

#include <cstdint>
#include <cstring>

#include "worker/engine/cuda/launch.h"
#include "worker/engine/elementwise.h"

namespace tagi::engine::cuda::kernels {
namespace {

// ---- Pooling (pool.cc) -------------------------------------------------

// The cells [lo, hi) of the image inside window `o` along one axis.
__device__ __host__ inline void WindowCells(size_t o, size_t stride, size_t kernel, size_t offset,
                                            size_t size, size_t* lo, size_t* hi) {
  const size_t start = o * stride;  // in padded coordinates
  const size_t a = (start > offset ? start : offset) - offset;
  const size_t end = start + kernel < size + offset ? start + kernel : size + offset;
  const size_t b = end > offset ? end - offset : 0;
  *lo = a;
  *hi = b > a ? b : a;
}

// The windows [lo, hi) along one axis that read image cell `cell`.
__device__ __host__ inline void WindowsOf(size_t cell, size_t stride, size_t kernel, size_t offset,
                                          size_t outs, size_t* lo, size_t* hi) {
  const size_t p = cell + offset;  // padded coordinate
  // o s <= p < o s + k  <=>  (p - k) / s < o <= p / s.
  *lo = p + 1 > kernel ? (p + 1 - kernel + stride - 1) / stride : 0;
  const size_t last = p / stride + 1;
  *hi = last < outs ? last : outs;
  if (*lo > *hi) *lo = *hi;
}

// Output cell `o` of a pooling layer: its plane's first input cell and the
// image cells [r0, r1) x [t0, t1) its window reads.
struct WindowRead {
  size_t in = 0;
  size_t r0 = 0, r1 = 0, t0 = 0, t1 = 0;
};
__device__ __host__ inline WindowRead ReadOf(const Window& g, size_t o) {
  const size_t out_size = g.out_height * g.out_width;
  WindowRead w;
  w.in = o / out_size * g.height * g.width;
  WindowCells((o % out_size) / g.out_width, g.stride, g.kernel, g.offset, g.height, &w.r0, &w.r1);
  WindowCells(o % g.out_width, g.stride, g.kernel, g.offset, g.width, &w.t0, &w.t1);
  return w;
}

// Input cell `i`: its plane's first output cell, its index in the plane and
// the windows [y0, y1) x [x0, x1) that read it.
struct CellReaders {
  size_t out = 0;
  size_t cell = 0;
  size_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;
};
__device__ __host__ inline CellReaders ReadersOf(const Window& g, size_t i) {
  const size_t in_size = g.height * g.width;
  CellReaders c;
  c.out = i / in_size * g.out_height * g.out_width;
  c.cell = i % in_size;
  WindowsOf(c.cell / g.width, g.stride, g.kernel, g.offset, g.out_height, &c.y0, &c.y1);
  WindowsOf(c.cell % g.width, g.stride, g.kernel, g.offset, g.out_width, &c.x0, &c.x1);
  return c;
}

__global__ void AvgPoolForwardKernel(Window g, const float* mu_a, const float* var_a, float* mu_z,
                                     float* var_z) {
  const size_t out_size = g.out_height * g.out_width;
  const float inv_k = 1.0f / static_cast<float>(g.kernel * g.kernel);
  TAGI_GRID_STRIDE(o, g.planes * out_size) {
    const WindowRead w = ReadOf(g, o);
    float mu = 0.0f;
    float var = 0.0f;
    for (size_t r = w.r0; r < w.r1; ++r) {
      for (size_t t = w.t0; t < w.t1; ++t) {
        mu += mu_a[w.in + r * g.width + t];
        var += var_a[w.in + r * g.width + t];
      }
    }
    mu_z[o] = mu * inv_k;
    var_z[o] = var * inv_k * inv_k;
  }
}

// Gathers, per input cell, what the windows that read it send back, in the
// order the CPU layer scatters it (windows row by row).
__global__ void AvgPoolBackwardKernel(Window g, const float* dmu, const float* dvar,
                                      float* dmu_in, float* dvar_in) {
  const size_t in_size = g.height * g.width;
  const float inv_k = 1.0f / static_cast<float>(g.kernel * g.kernel);
  TAGI_GRID_STRIDE(i, g.planes * in_size) {
    const CellReaders c = ReadersOf(g, i);
    float mu = 0.0f;
    float var = 0.0f;
    for (size_t y = c.y0; y < c.y1; ++y) {
      for (size_t x = c.x0; x < c.x1; ++x) {
        const size_t o = c.out + y * g.out_width + x;
        mu += dmu[o] * inv_k;
        var += dvar[o] * inv_k * inv_k;
      }
    }
    dmu_in[i] = mu;
    dvar_in[i] = var;
  }
}

__device__ __host__ inline float IndexBits(uint32_t index) {
  float f;
  memcpy(&f, &index, sizeof f);
  return f;
}
__device__ __host__ inline uint32_t BitsIndex(float f) {
  uint32_t index;
  memcpy(&index, &f, sizeof index);
  return index;
}

__global__ void MaxPoolForwardKernel(Window g, const float* mu_a, const float* var_a, float* mu_z,
                                     float* var_z, float* index) {
  const size_t out_size = g.out_height * g.out_width;
  TAGI_GRID_STRIDE(o, g.planes * out_size) {
    const WindowRead w = ReadOf(g, o);
    const size_t in = w.in;
    size_t best = in + w.r0 * g.width + w.t0;
    float best_mu = -INFINITY;
    for (size_t r = w.r0; r < w.r1; ++r) {
      for (size_t t = w.t0; t < w.t1; ++t) {
        const size_t i = in + r * g.width + t;
        if (mu_a[i] > best_mu) {  // strictly: ties keep the first
          best_mu = mu_a[i];
          best = i;
        }
      }
    }
    mu_z[o] = mu_a[best];
    var_z[o] = var_a[best];
    index[o] = IndexBits(static_cast<uint32_t>(best - in));
  }
}

__global__ void MaxPoolBackwardKernel(Window g, const float* index, const float* dmu,
                                      const float* dvar, float* dmu_in, float* dvar_in) {
  const size_t in_size = g.height * g.width;
  TAGI_GRID_STRIDE(i, g.planes * in_size) {
    const CellReaders c = ReadersOf(g, i);
    float mu = 0.0f;
    float var = 0.0f;
    for (size_t y = c.y0; y < c.y1; ++y) {
      for (size_t x = c.x0; x < c.x1; ++x) {
        const size_t o = c.out + y * g.out_width + x;
        if (BitsIndex(index[o]) == c.cell) {
          mu += dmu[o];
          var += dvar[o];
        }
      }
    }
    dmu_in[i] = mu;
    dvar_in[i] = var;
  }
}

__global__ void PadOrCropKernel(const float* src, size_t planes, size_t height, size_t width,
                                float* dst, size_t out_height, size_t out_width) {
  const size_t out_size = out_height * out_width;
  TAGI_GRID_STRIDE(i, planes * out_size) {
    const size_t plane = i / out_size;
    const size_t y = (i % out_size) / out_width;
    const size_t x = i % out_width;
    dst[i] = y < height && x < width ? src[(plane * height + y) * width + x] : 0.0f;
  }
}

// ---- Deterministic sums over groups ------------------------------------

// The work buffer: totals [groups][4], means [groups] (double), then the
// partials [groups][parts][4].
constexpr size_t kSums = 4;

// Parts per group: enough threads to fill a GPU (an H100 holds about 270k
// resident threads; 32k left its SMs mostly idle), at least 32 values each.
constexpr size_t kPartialThreads = size_t{1} << 17;
size_t Parts(size_t groups, size_t count) {
  const size_t by_count = count / 32 > 0 ? count / 32 : 1;
  const size_t by_threads = groups >= kPartialThreads ? 1 : kPartialThreads / groups;
  return by_count < by_threads ? by_count : by_threads;
}

// The partials are added up in chunks of about sqrt(parts), then the chunks:
// two short loops over many threads instead of one long loop per group (one
// thread per group summing 512 parts took 120 us a launch, a tenth of a
// ResNet18 step on an H100). The order is fixed, so the sums are
// deterministic.
size_t ChunkOf(size_t parts) {
  size_t c = 1;
  while (c * c < parts) ++c;
  return c;
}

// Where value j of group g lies. Channel groups of a [batch][C][P] tensor:
// (j / P) * C P + g P + j % P over count = batch * P; sample groups: the
// whole sample, g * (C P) + j over count = C * P.
struct Groups {
  size_t channels = 0;
  size_t positions = 0;
  bool per_sample = false;
  __device__ __host__ size_t At(size_t g, size_t j) const {
    const size_t sample = channels * positions;
    if (per_sample) return g * sample + j;
    return (j / positions) * sample + g * positions + j % positions;
  }
  // The sample of value j of group g.
  __device__ __host__ size_t SampleOf(size_t g, size_t j) const {
    return per_sample ? g : j / positions;
  }
};

// partials[g][k][m] = the sum over j = k, k + parts, ... < count of term's
// m-th value at (g, j).
template <typename Term>
__global__ void PartialSumsKernel(Term term, size_t groups, size_t parts, size_t count,
                                  double* partials) {
  TAGI_GRID_STRIDE(t, groups * parts) {
    const size_t g = t / parts;
    double acc[kSums] = {0.0, 0.0, 0.0, 0.0};
    for (size_t j = t % parts; j < count; j += parts) term(g, j, acc);
    for (size_t m = 0; m < kSums; ++m) partials[t * kSums + m] = acc[m];
  }
}

// In place: the first part of each chunk of `chunk` parts becomes the
// chunk's sum (each thread reads and writes its own chunk only).
__global__ void ChunkSumsKernel(double* partials, size_t groups, size_t parts, size_t chunk,
                                size_t used) {
  const size_t chunks = (parts + chunk - 1) / chunk;
  TAGI_GRID_STRIDE(t, groups * chunks) {
    const size_t g = t / chunks;
    const size_t begin = g * parts + (t % chunks) * chunk;
    const size_t end = begin + chunk < (g + 1) * parts ? begin + chunk : (g + 1) * parts;
    double acc[kSums] = {0.0, 0.0, 0.0, 0.0};
    for (size_t k = begin; k < end; ++k) {
      for (size_t m = 0; m < used; ++m) acc[m] += partials[k * kSums + m];
    }
    for (size_t m = 0; m < used; ++m) partials[begin * kSums + m] = acc[m];
  }
}

// totals[g][m] = the sum of the chunks' sums of group g.
__global__ void TotalsKernel(const double* partials, size_t groups, size_t parts, size_t chunk,
                             size_t used, double* totals) {
  TAGI_GRID_STRIDE(g, groups) {
    double acc[kSums] = {0.0, 0.0, 0.0, 0.0};
    for (size_t k = 0; k < parts; k += chunk) {
      for (size_t m = 0; m < used; ++m) acc[m] += partials[(g * parts + k) * kSums + m];
    }
    for (size_t m = 0; m < used; ++m) totals[g * kSums + m] = acc[m];
  }
}

// totals[g][0..used) = the sums of term over each group (the other totals
// are left as they were).
template <typename Term>
cudaError_t GroupSums(const Term& term, size_t groups, size_t count, size_t used, double* work,
                      cudaStream_t stream) {
  const size_t parts = Parts(groups, count);
  const size_t chunk = ChunkOf(parts);
  double* partials = work + groups * (kSums + 1);
  cudaError_t err = Launch(&PartialSumsKernel<Term>, groups * parts, stream, term, groups, parts,
                           count, partials);
  if (err == cudaSuccess && chunk > 1) {
    err = Launch(&ChunkSumsKernel, groups * ((parts + chunk - 1) / chunk), stream, partials,
                 groups, parts, chunk, used);
  }
  if (err != cudaSuccess) return err;
  return Launch(&TotalsKernel, groups, stream, partials, groups, parts, chunk, used, work);
}

struct MeanVarTerm {
  Groups at;
  const float* mu;
  const float* var;
  __device__ __host__ void operator()(size_t g, size_t j, double* acc) const {
    const size_t i = at.At(g, j);
    acc[0] += mu[i];
    acc[1] += var[i];
  }
};

// MeanVarTerm's sums of an absorbed activation's units, computed from its
// input on the way (each unit is visited once: the parts split the
// values), their means and jcb written as the activation's kernel would.
struct ActivatedMeanVarTerm {
  Groups at;
  AbsorbedActivation act;
  __device__ __host__ void operator()(size_t g, size_t j, double* acc) const {
    const size_t i = at.At(g, j);
    const elementwise::Moments m =
        elementwise::ActivateUnit(act.kind, act.slope, act.mu_z[i], act.var_z[i]);
    act.mu_a[i] = m.mu;
    act.jcb[i] = m.jcb;
    acc[0] += m.mu;
    acc[1] += m.var;
  }
};

// The sums of the means and the variances per group, of the units or of an
// absorbed activation's.
cudaError_t MeanVarSums(const Groups& at, size_t groups, size_t count, const float* mu_a,
                        const float* var_a, const AbsorbedActivation& act, double* work,
                        cudaStream_t stream) {
  if (act.on()) return GroupSums(ActivatedMeanVarTerm{at, act}, groups, count, 2, work, stream);
  return GroupSums(MeanVarTerm{at, mu_a, var_a}, groups, count, 2, work, stream);
}

// The spread about each group's double mean (work's means), as
// Statistics in norm.cc computes it.
struct SpreadTerm {
  Groups at;
  const float* mu;
  const double* means;
  __device__ __host__ void operator()(size_t g, size_t j, double* acc) const {
    const double d = mu[at.At(g, j)] - means[g];
    acc[0] += d * d;
  }
};

// The spread about a float mean, as SyncedStatistics computes it.
struct FloatSpreadTerm {
  Groups at;
  const float* mu;
  const float* mean;
  __device__ __host__ void operator()(size_t g, size_t j, double* acc) const {
    const double d = mu[at.At(g, j)] - mean[g];
    acc[0] += d * d;
  }
};

// mean = total / count into work's means (double) and `mean` (float).
__global__ void MeanKernel(double* work, size_t groups, size_t count, float* mean,
                           size_t mean_stride) {
  TAGI_GRID_STRIDE(g, groups) {
    const double m = work[g * kSums] / static_cast<double>(count);
    work[groups * kSums + g] = m;
    mean[g * mean_stride] = static_cast<float>(m);
  }
}

// var = (spread + sum of variances) / (count - 1), count at least 2.
__global__ void VarianceKernel(const double* work, size_t groups, size_t count, float* var,
                               size_t var_stride) {
  const double divisor = static_cast<double>(count < 2 ? 2 : count) - 1.0;
  TAGI_GRID_STRIDE(g, groups) {
    var[g * var_stride] = static_cast<float>((work[g * kSums] + work[g * kSums + 1]) / divisor);
  }
}

// Statistics over groups: the CPU's two passes (norm.cc's Statistics).
cudaError_t Statistics(const Groups& at, size_t groups, size_t count, const float* mu_a,
                       const float* var_a, float* mean, float* var, size_t stride, double* work,
                       cudaStream_t stream, const AbsorbedActivation& act) {
  cudaError_t err = MeanVarSums(at, groups, count, mu_a, var_a, act, work, stream);
  if (err == cudaSuccess) err = Launch(&MeanKernel, groups, stream, work, groups, count, mean, stride);
  // The spread goes to totals[g][0]; the summed variances stay in [g][1].
  if (err == cudaSuccess) {
    err = GroupSums(SpreadTerm{at, mu_a, work + groups * kSums}, groups, count, 1, work, stream);
  }
  if (err == cudaSuccess) err = Launch(&VarianceKernel, groups, stream, work, groups, count, var, stride);
  return err;
}

__global__ void SumsOutKernel(const double* work, size_t groups, float* first, float* second) {
  TAGI_GRID_STRIDE(g, groups) {
    first[g] = static_cast<float>(work[g * kSums]);
    if (second != nullptr) second[g] = static_cast<float>(work[g * kSums + 1]);
  }
}

__global__ void SyncedMeanKernel(size_t channels, double total, float* sums, float* var_sum) {
  TAGI_GRID_STRIDE(c, channels) {
    var_sum[c] = sums[channels + c];
    sums[c] = static_cast<float>(sums[c] / total);
  }
}

__global__ void SyncedVarianceKernel(size_t channels, double divisor, const float* var_sum,
                                     float* sums) {
  TAGI_GRID_STRIDE(c, channels) {
    float* var = sums + channels;
    var[c] = static_cast<float>((static_cast<double>(var[c]) + var_sum[c]) / divisor);
  }
}

__global__ void UpdateRunningKernel(size_t channels, const float* batch_mean,
                                    const float* batch_var, float momentum, float* running_mean,
                                    float* running_var, const float* first) {
  const float m = *first > 0.0f ? 0.0f : momentum;
  TAGI_GRID_STRIDE(c, channels) {
    running_mean[c] = elementwise::RunningUpdate(running_mean[c], batch_mean[c], m);
    running_var[c] = elementwise::RunningUpdate(running_var[c], batch_var[c], m);
  }
}

__global__ void ClearKernel(float* flag) {
  TAGI_GRID_STRIDE(i, 1) { *flag = 0.0f; }
}

// Forward of either norm; stats per channel (mean[c], var[c] at stats and
// stats + channels) or per sample (stats[2b], stats[2b + 1]).
__global__ void NormForwardKernel(ChannelLayout l, bool per_sample, const float* stats, float eps,
                                  const float* mu_a, const float* var_a, const float* mu_g,
                                  const float* var_g, const float* mu_b, const float* var_b,
                                  float* mu_z, float* var_z, AbsorbedActivation act) {
  const size_t sample = l.channels * l.positions;
  TAGI_GRID_STRIDE(i, l.batch * sample) {
    const size_t c = (i / l.positions) % l.channels;
    const size_t b = i / sample;
    const float mean = per_sample ? stats[2 * b] : stats[c];
    const float var = per_sample ? stats[2 * b + 1] : stats[l.channels + c];
    const float r = 1.0f / sqrtf(var + eps);
    const float second = mu_g[c] * mu_g[c] + var_g[c];
    const elementwise::Moments a =
        act.on() ? elementwise::ActivateUnit(act.kind, act.slope, act.mu_z[i], act.var_z[i])
                 : elementwise::Moments{mu_a[i], var_a[i], 1.0f};
    elementwise::Normalise(a.mu, a.var, mean, r, mu_g[c], second, var_g[c],
                           mu_b != nullptr ? mu_b[c] : 0.0f, mu_b != nullptr ? var_b[c] : 0.0f,
                           &mu_z[i], &var_z[i]);
  }
}

// Gamma's and beta's delta terms of one input (norm.cc's AddParamSums).
struct NormDeltaTerm {
  Groups at;  // channel groups
  bool per_sample;
  const float* stats;
  float eps;
  const float* mu_a;
  const float* dmu;
  const float* dvar;
  const float* var_g;
  __device__ __host__ void operator()(size_t c, size_t j, double* acc) const {
    const size_t i = at.At(c, j);
    const size_t b = at.SampleOf(c, j);
    const float mean = per_sample ? stats[2 * b] : stats[c];
    const float var = per_sample ? stats[2 * b + 1] : stats[at.channels + c];
    const float r = 1.0f / sqrtf(var + eps);
    const float g = elementwise::GammaFactor(mu_a[i], mean, r, var_g[c]);
    acc[0] += g * dmu[i];
    acc[1] += g * g * dvar[i];
    acc[2] += dmu[i];
    acc[3] += dvar[i];
  }
};

__global__ void NormDeltasKernel(const double* work, size_t channels, const float* var_b,
                                 float* dmu_g, float* dvar_g, float* dmu_b, float* dvar_b) {
  TAGI_GRID_STRIDE(c, channels) {
    const double* s = work + c * kSums;
    dmu_g[c] = static_cast<float>(s[0]);
    dvar_g[c] = static_cast<float>(s[1]);
    if (dmu_b != nullptr) {
      dmu_b[c] = static_cast<float>(var_b[c] * s[2]);
      dvar_b[c] = static_cast<float>(var_b[c] * var_b[c] * s[3]);
    }
  }
}

__global__ void NormInputDeltasKernel(ChannelLayout l, bool per_sample, const float* stats,
                                      float eps, const float* mu_g, const float* dmu,
                                      const float* dvar, float* dmu_in, float* dvar_in,
                                      const float* jcb) {
  const size_t sample = l.channels * l.positions;
  TAGI_GRID_STRIDE(i, l.batch * sample) {
    const size_t c = (i / l.positions) % l.channels;
    const size_t b = i / sample;
    const float var = per_sample ? stats[2 * b + 1] : stats[l.channels + c];
    const float k = 1.0f / sqrtf(var + eps) * mu_g[c];
    const float dm = k * dmu[i];
    const float dv = k * k * dvar[i];
    if (jcb == nullptr) {
      dmu_in[i] = dm;
      dvar_in[i] = dv;
    } else {
      // An absorbed activation's backward (kernels.cu's), on the way.
      dmu_in[i] = jcb[i] * dm;
      dvar_in[i] = jcb[i] * jcb[i] * dv;
    }
  }
}

__global__ void AddChannelBiasKernel(ChannelLayout l, const float* mu_b, const float* var_b,
                                     float* mu_z, float* var_z) {
  TAGI_GRID_STRIDE(i, l.batch * l.channels * l.positions) {
    const size_t c = (i / l.positions) % l.channels;
    mu_z[i] = mu_z[i] + mu_b[c];
    var_z[i] = var_z[i] + var_b[c];
  }
}

struct BiasTerm {
  Groups at;
  const float* dmu;
  const float* dvar;
  __device__ __host__ void operator()(size_t c, size_t j, double* acc) const {
    const size_t i = at.At(c, j);
    acc[0] += dmu[i];
    acc[1] += dvar[i];
  }
};

__global__ void ChannelBiasDeltasKernel(const double* work, size_t channels, const float* var_b,
                                 float* dmu_b, float* dvar_b) {
  TAGI_GRID_STRIDE(c, channels) {
    dmu_b[c] = var_b[c] * static_cast<float>(work[c * kSums]);
    dvar_b[c] = var_b[c] * var_b[c] * static_cast<float>(work[c * kSums + 1]);
  }
}

__global__ void ScaleIntoKernel(const float* in, size_t n, float scale, float* out) {
  TAGI_GRID_STRIDE(i, n) { out[i] = in[i] * scale; }
}

Groups ChannelGroups(const ChannelLayout& l) { return {l.channels, l.positions, false}; }
Groups SampleGroups(const ChannelLayout& l) { return {l.channels, l.positions, true}; }

}  // namespace

cudaError_t AvgPoolForward(const Window& g, const float* mu_a, const float* var_a, float* mu_z,
                           float* var_z, cudaStream_t stream) {
  return Launch(&AvgPoolForwardKernel, g.planes * g.out_height * g.out_width, stream, g, mu_a,
                var_a, mu_z, var_z);
}

cudaError_t AvgPoolBackward(const Window& g, const float* delta_mu, const float* delta_var,
                            float* delta_mu_in, float* delta_var_in, cudaStream_t stream) {
  return Launch(&AvgPoolBackwardKernel, g.planes * g.height * g.width, stream, g, delta_mu,
                delta_var, delta_mu_in, delta_var_in);
}

cudaError_t MaxPoolForward(const Window& g, const float* mu_a, const float* var_a, float* mu_z,
                           float* var_z, float* index, cudaStream_t stream) {
  return Launch(&MaxPoolForwardKernel, g.planes * g.out_height * g.out_width, stream, g, mu_a,
                var_a, mu_z, var_z, index);
}

cudaError_t MaxPoolBackward(const Window& g, const float* index, const float* delta_mu,
                            const float* delta_var, float* delta_mu_in, float* delta_var_in,
                            cudaStream_t stream) {
  return Launch(&MaxPoolBackwardKernel, g.planes * g.height * g.width, stream, g, index, delta_mu,
                delta_var, delta_mu_in, delta_var_in);
}

cudaError_t PadOrCrop(const float* src, size_t planes, size_t height, size_t width, float* dst,
                      size_t out_height, size_t out_width, cudaStream_t stream) {
  return Launch(&PadOrCropKernel, planes * out_height * out_width, stream, src, planes, height,
                width, dst, out_height, out_width);
}

size_t SumWorkspaceDoubles(size_t groups, size_t count) {
  return groups * (kSums + 1) + groups * Parts(groups, count) * kSums;
}

cudaError_t AddChannelBias(const ChannelLayout& l, const float* mu_b, const float* var_b,
                           float* mu_z, float* var_z, cudaStream_t stream) {
  return Launch(&AddChannelBiasKernel, l.batch * l.channels * l.positions, stream, l, mu_b, var_b,
                mu_z, var_z);
}

cudaError_t ChannelBiasDeltas(const ChannelLayout& l, const float* delta_mu,
                              const float* delta_var, const float* var_b, float* delta_mu_b,
                              float* delta_var_b, double* work, cudaStream_t stream) {
  cudaError_t err = GroupSums(BiasTerm{ChannelGroups(l), delta_mu, delta_var}, l.channels,
                              l.batch * l.positions, 2, work, stream);
  if (err != cudaSuccess) return err;
  return Launch(&ChannelBiasDeltasKernel, l.channels, stream, work, l.channels, var_b, delta_mu_b,
                delta_var_b);
}

cudaError_t BatchStatistics(const ChannelLayout& l, const float* mu_a, const float* var_a,
                            float* mean, float* var, double* work, cudaStream_t stream,
                            const AbsorbedActivation& act) {
  return Statistics(ChannelGroups(l), l.channels, l.batch * l.positions, mu_a, var_a, mean, var,
                    1, work, stream, act);
}

cudaError_t SyncedSums(const ChannelLayout& l, const float* mu_a, const float* var_a, float* sums,
                       double* work, cudaStream_t stream, const AbsorbedActivation& act) {
  cudaError_t err = MeanVarSums(ChannelGroups(l), l.channels, l.batch * l.positions, mu_a, var_a,
                                act, work, stream);
  if (err != cudaSuccess) return err;
  return Launch(&SumsOutKernel, l.channels, stream, work, l.channels, sums, sums + l.channels);
}

cudaError_t SyncedSpread(const ChannelLayout& l, const float* mu_a, double total, float* sums,
                         float* var_sum, double* work, cudaStream_t stream) {
  cudaError_t err = Launch(&SyncedMeanKernel, l.channels, stream, l.channels, total, sums, var_sum);
  if (err == cudaSuccess) {
    err = GroupSums(FloatSpreadTerm{ChannelGroups(l), mu_a, sums}, l.channels,
                    l.batch * l.positions, 1, work, stream);
  }
  if (err != cudaSuccess) return err;
  return Launch(&SumsOutKernel, l.channels, stream, work, l.channels, sums + l.channels,
                static_cast<float*>(nullptr));
}

cudaError_t SyncedVariance(size_t channels, double total, const float* var_sum, float* sums,
                           cudaStream_t stream) {
  const double divisor = (total < 2.0 ? 2.0 : total) - 1.0;
  return Launch(&SyncedVarianceKernel, channels, stream, channels, divisor, var_sum, sums);
}

cudaError_t UpdateRunning(size_t channels, const float* batch_mean, const float* batch_var,
                          float momentum, float* running_mean, float* running_var, float* first,
                          cudaStream_t stream) {
  cudaError_t err = Launch(&UpdateRunningKernel, channels, stream, channels, batch_mean, batch_var,
                           momentum, running_mean, running_var, static_cast<const float*>(first));
  if (err != cudaSuccess) return err;
  return Launch(&ClearKernel, 1, stream, first);
}

cudaError_t BatchNormForward(const ChannelLayout& l, const float* mu_a, const float* var_a,
                             const float* mean, const float* var, float eps, const float* mu_g,
                             const float* var_g, const float* mu_b, const float* var_b,
                             float* mu_z, float* var_z, cudaStream_t stream,
                             const AbsorbedActivation& act) {
  // The kernel reads per-channel statistics at stats[c] and
  // stats[channels + c]: mean and var must be one buffer, var after mean.
  if (var != mean + l.channels) return cudaErrorInvalidValue;
  return Launch(&NormForwardKernel, l.batch * l.channels * l.positions, stream, l, false, mean,
                eps, mu_a, var_a, mu_g, var_g, mu_b, var_b, mu_z, var_z, act);
}

cudaError_t SampleStatistics(const ChannelLayout& l, const float* mu_a, const float* var_a,
                             float* stats, double* work, cudaStream_t stream,
                             const AbsorbedActivation& act) {
  return Statistics(SampleGroups(l), l.batch, l.channels * l.positions, mu_a, var_a, stats,
                    stats + 1, 2, work, stream, act);
}

cudaError_t LayerNormForward(const ChannelLayout& l, const float* mu_a, const float* var_a,
                             const float* stats, float eps, const float* mu_g, const float* var_g,
                             const float* mu_b, const float* var_b, float* mu_z, float* var_z,
                             cudaStream_t stream, const AbsorbedActivation& act) {
  return Launch(&NormForwardKernel, l.batch * l.channels * l.positions, stream, l, true, stats,
                eps, mu_a, var_a, mu_g, var_g, mu_b, var_b, mu_z, var_z, act);
}

cudaError_t NormBackward(const ChannelLayout& l, bool per_sample, const float* stats, float eps,
                         const float* mu_a, const float* delta_mu, const float* delta_var,
                         const float* mu_g, const float* var_g, const float* var_b,
                         float* delta_mu_g, float* delta_var_g, float* delta_mu_b,
                         float* delta_var_b, float* delta_mu_in, float* delta_var_in,
                         double* work, cudaStream_t stream, const AbsorbedActivation& act) {
  const NormDeltaTerm term{ChannelGroups(l), per_sample, stats, eps, mu_a, delta_mu, delta_var,
                           var_g};
  cudaError_t err = GroupSums(term, l.channels, l.batch * l.positions, 4, work, stream);
  if (err == cudaSuccess) {
    err = Launch(&NormDeltasKernel, l.channels, stream, static_cast<const double*>(work),
                 l.channels, var_b, delta_mu_g, delta_var_g, delta_mu_b, delta_var_b);
  }
  if (err != cudaSuccess || delta_mu_in == nullptr) return err;
  return Launch(&NormInputDeltasKernel, l.batch * l.channels * l.positions, stream, l, per_sample,
                stats, eps, mu_g, delta_mu, delta_var, delta_mu_in, delta_var_in,
                static_cast<const float*>(act.on() ? act.jcb : nullptr));
}

cudaError_t ScaleInto(const float* in, size_t n, float scale, float* out, cudaStream_t stream) {
  return Launch(&ScaleIntoKernel, n, stream, in, n, scale, out);
}

}  // namespace tagi::engine::cuda::kernels
