// tagi::ref: a plain double-precision reference of the TAGI image layers,
// written term by term from docs/maths.md (sections 2, 9-12) and the capped
// step of its section 7. It is the yardstick the fast engine is
// tested against, so every function is a direct loop over the sum its
// equation writes, with no reordering beyond the choice of loop nest and no
// BLAS. It shares no code with the engine.
//
// Where the text lists a bug of the reference library, this file does the
// fixed thing (docs/maths.md section 14):
//   B1  the first training batch of a BatchNorm replaces the running
//       statistics (momentum 0), always;
//   B3  the BatchNorm path follows the input's shape: a map C x H x W takes
//       statistics per channel over (b, y, x), a flat input of F features
//       (Geometry{F, 1, 1}) per feature over b;
//   B5  padded pools skip the padding cells (and still divide by k^2);
//   B6  strides larger than the kernel work; pixels no window reads get zero
//       innovations;
//   Q3  images need not be square.
//
// Layout conventions:
//   * activations [batch][C][H][W] row-major (a flat input of F features is
//     Geometry{F, 1, 1});
//   * Conv2d weights [C_out][C_in][k][k], biases [C_out];
//   * BatchNorm / LayerNorm gamma (mu_w, var_w) and beta (mu_b, var_b) have
//     one entry per channel (maps) or per feature (flat input);
//   * BatchNorm statistics: one entry per channel; LayerNorm statistics: one
//     entry per sample.
//
// Delta convention (docs/maths.md section 2, with the jcb where the reference
// puts it): every backward function takes the normalised innovations of its
// layer's output and returns those of its input already multiplied by the
// input's jcb (jcb squared for the variance).
// Parameter deltas are sums over the batch (and positions) before any cap.
//
// Broken preconditions (wrong vector sizes, a geometry that does not divide)
// are programmer errors: the function prints what was wrong and aborts.
// Everything here is a pure function of its arguments; thread-compatible.
#ifndef TAGI_TESTS_ENGINE_CNN_REFERENCE_H_
#define TAGI_TESTS_ENGINE_CNN_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace tagi::ref {

// ---------------------------------------------------------------------------
// Shapes, windows, checks.

inline void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tagi::ref precondition failed: %s\n", what);
    std::abort();
  }
}

// One sample's shape.
struct Geometry {
  int channels = 0, height = 0, width = 0;
  size_t size() const { return static_cast<size_t>(channels) * height * width; }
};

// Flat index of element (b, c, y, x) of a [batch][C][H][W] tensor.
inline size_t At(const Geometry& g, int b, int c, int y, int x) {
  return ((static_cast<size_t>(b) * g.channels + c) * g.height + y) * g.width + x;
}

// docs/maths.md section 9: padding type 1 puts p rows/columns on every side,
// type 2 at the bottom and right only.
enum class PadType { kSymmetric = 1, kBottomRight = 2 };

struct Window {
  int kernel = 1, stride = 1, padding = 0;
  PadType type = PadType::kSymmetric;
};

// Offset q of the first window's origin: p for symmetric padding, 0 for
// bottom/right padding.
inline int PadOffset(const Window& w) { return w.type == PadType::kSymmetric ? w.padding : 0; }

// Output size along one axis, W_o = nom / s + 1 with nom = W - k + 2p
// (symmetric) or W - k + p (bottom/right); -1 when nom is negative or not a
// multiple of the stride (the reference's exact-division rule, Q1), or when
// the window itself is invalid (k < 1, s < 1, p < 0).
inline int OutSize(int size, const Window& w) {
  if (size < 1 || w.kernel < 1 || w.stride < 1 || w.padding < 0) return -1;
  const int pads = w.type == PadType::kSymmetric ? 2 * w.padding : w.padding;
  const int nom = size - w.kernel + pads;
  if (nom < 0 || nom % w.stride != 0) return -1;
  return nom / w.stride + 1;
}

// Shape of a window layer's output (a Conv2d with `channels` filters, or a
// pool with channels = in.channels). Aborts when either axis does not divide.
inline Geometry WindowOutput(const Geometry& in, const Window& w, int channels) {
  const Geometry out{channels, OutSize(in.height, w), OutSize(in.width, w)};
  Require(out.height > 0 && out.width > 0, "window geometry does not divide the input");
  return out;
}

// The input pixel (r, t) read by output (y, x) through kernel element (i, j):
// (y*s + i - q, x*s + j - q). Returns false when it is padding.
inline bool Source(const Geometry& in, const Window& w, int y, int x, int i, int j, int* r,
                   int* t) {
  const int q = PadOffset(w);
  *r = y * w.stride + i - q;
  *t = x * w.stride + j - q;
  return *r >= 0 && *r < in.height && *t >= 0 && *t < in.width;
}

// The inverse: the output (y, x) that reads input pixel (r, t) through kernel
// element (i, j), i.e. y*s + i - q = r and x*s + j - q = t. Returns false
// when no output position does.
inline bool Reader(const Geometry& out, const Window& w, int r, int t, int i, int j, int* y,
                   int* x) {
  const int q = PadOffset(w);
  const int ys = r + q - i, xs = t + q - j;
  if (ys < 0 || xs < 0 || ys % w.stride != 0 || xs % w.stride != 0) return false;
  *y = ys / w.stride;
  *x = xs / w.stride;
  return *y < out.height && *x < out.width;
}

// Means and variances of one tensor, same length.
struct Gaussians {
  std::vector<double> mu, var;
};

inline Gaussians Zeros(size_t n) {
  return {std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
}

inline void RequireSize(const Gaussians& g, size_t n, const char* what) {
  Require(g.mu.size() == n && g.var.size() == n, what);
}

// Deltas of a layer's four parameter vectors (weights / gamma, biases / beta);
// the bias vectors are empty when the layer has no bias.
struct ParamDeltas {
  std::vector<double> mu_w, var_w, mu_b, var_b;
};

// ---------------------------------------------------------------------------
// Conv2d (docs/maths.md section 10).

struct ConvParams {
  std::vector<double> mu_w, var_w;  // [c_out][C_in][k][k]
  std::vector<double> mu_b, var_b;  // [c_out], ignored (may be empty) without bias
  bool bias = true;
  int c_out = 0;
};

inline size_t WeightAt(const Geometry& in, const Window& w, int o, int c, int i, int j) {
  return ((static_cast<size_t>(o) * in.channels + c) * w.kernel + i) * w.kernel + j;
}

inline void RequireConv(const ConvParams& p, const Geometry& in, const Window& w) {
  const size_t nw = static_cast<size_t>(p.c_out) * in.channels * w.kernel * w.kernel;
  Require(p.c_out > 0 && p.mu_w.size() == nw && p.var_w.size() == nw, "conv weight sizes");
  Require(!p.bias || (p.mu_b.size() == static_cast<size_t>(p.c_out) &&
                      p.var_b.size() == static_cast<size_t>(p.c_out)),
          "conv bias sizes");
}

// mu_z[b,o,y,x]  = sum mu_w*mu_a + mu_b[o]
// var_z[b,o,y,x] = sum ((mu_w^2 + var_w)*var_a + var_w*mu_a^2) + var_b[o]
// over the input channels c and the non-padding kernel elements (i, j).
// Returns [batch][c_out][H_o][W_o].
inline Gaussians ConvForward(const ConvParams& p, const Geometry& in, const Window& w,
                             const Gaussians& a, int batch) {
  RequireConv(p, in, w);
  RequireSize(a, batch * in.size(), "conv input size");
  const Geometry out = WindowOutput(in, w, p.c_out);
  Gaussians z = Zeros(batch * out.size());
  for (int b = 0; b < batch; ++b) {
    for (int o = 0; o < out.channels; ++o) {
      for (int y = 0; y < out.height; ++y) {
        for (int x = 0; x < out.width; ++x) {
          double mu = 0.0, var = 0.0;
          for (int c = 0; c < in.channels; ++c) {
            for (int i = 0; i < w.kernel; ++i) {
              for (int j = 0; j < w.kernel; ++j) {
                int r, t;
                if (!Source(in, w, y, x, i, j, &r, &t)) continue;
                const double mw = p.mu_w[WeightAt(in, w, o, c, i, j)];
                const double vw = p.var_w[WeightAt(in, w, o, c, i, j)];
                const double ma = a.mu[At(in, b, c, r, t)];
                const double va = a.var[At(in, b, c, r, t)];
                mu += mw * ma;
                var += (mw * mw + vw) * va + vw * ma * ma;
              }
            }
          }
          if (p.bias) {
            mu += p.mu_b[o];
            var += p.var_b[o];
          }
          z.mu[At(out, b, o, y, x)] = mu;
          z.var[At(out, b, o, y, x)] = var;
        }
      }
    }
  }
  return z;
}

// delta_mu_a[b,c,r,t]  = jcb_a   * sum mu_w[o,c,i,j]   * delta_mu_z[b,o,y,x]
// delta_var_a[b,c,r,t] = jcb_a^2 * sum mu_w[o,c,i,j]^2 * delta_var_z[b,o,y,x]
// over o and every (y, x, i, j) with y*s + i - q = r, x*s + j - q = t.
// delta_z is [batch][c_out][H_o][W_o]; returns [batch][C_in][H][W].
inline Gaussians ConvBackwardInput(const ConvParams& p, const Geometry& in, const Window& w,
                                   const std::vector<double>& jcb_a, const Gaussians& delta_z,
                                   int batch) {
  RequireConv(p, in, w);
  const Geometry out = WindowOutput(in, w, p.c_out);
  Require(jcb_a.size() == batch * in.size(), "conv jcb size");
  RequireSize(delta_z, batch * out.size(), "conv output delta size");
  Gaussians d = Zeros(batch * in.size());
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < in.channels; ++c) {
      for (int r = 0; r < in.height; ++r) {
        for (int t = 0; t < in.width; ++t) {
          double sm = 0.0, sv = 0.0;
          for (int o = 0; o < out.channels; ++o) {
            for (int i = 0; i < w.kernel; ++i) {
              for (int j = 0; j < w.kernel; ++j) {
                int y, x;
                if (!Reader(out, w, r, t, i, j, &y, &x)) continue;
                const double mw = p.mu_w[WeightAt(in, w, o, c, i, j)];
                sm += mw * delta_z.mu[At(out, b, o, y, x)];
                sv += mw * mw * delta_z.var[At(out, b, o, y, x)];
              }
            }
          }
          const double jcb = jcb_a[At(in, b, c, r, t)];
          d.mu[At(in, b, c, r, t)] = jcb * sm;
          d.var[At(in, b, c, r, t)] = jcb * jcb * sv;
        }
      }
    }
  }
  return d;
}

// delta_mu_w[o,c,i,j]  = var_w   * sum_b sum_(y,x) mu_a[b,c,r,t]   * delta_mu_z[b,o,y,x]
// delta_var_w[o,c,i,j] = var_w^2 * sum_b sum_(y,x) mu_a[b,c,r,t]^2 * delta_var_z[b,o,y,x]
// delta_mu_b[o]  = var_b   * sum_b sum_(y,x) delta_mu_z[b,o,y,x]
// delta_var_b[o] = var_b^2 * sum_b sum_(y,x) delta_var_z[b,o,y,x]
// (the (y, x) whose (r, t) is padding are skipped). Only a.mu is read.
inline ParamDeltas ConvBackwardParams(const ConvParams& p, const Geometry& in, const Window& w,
                                      const Gaussians& a, const Gaussians& delta_z, int batch) {
  RequireConv(p, in, w);
  const Geometry out = WindowOutput(in, w, p.c_out);
  Require(a.mu.size() == batch * in.size(), "conv input size");
  RequireSize(delta_z, batch * out.size(), "conv output delta size");
  ParamDeltas d;
  d.mu_w.assign(p.mu_w.size(), 0.0);
  d.var_w.assign(p.var_w.size(), 0.0);
  for (int o = 0; o < out.channels; ++o) {
    for (int c = 0; c < in.channels; ++c) {
      for (int i = 0; i < w.kernel; ++i) {
        for (int j = 0; j < w.kernel; ++j) {
          double sm = 0.0, sv = 0.0;
          for (int b = 0; b < batch; ++b) {
            for (int y = 0; y < out.height; ++y) {
              for (int x = 0; x < out.width; ++x) {
                int r, t;
                if (!Source(in, w, y, x, i, j, &r, &t)) continue;
                const double ma = a.mu[At(in, b, c, r, t)];
                sm += ma * delta_z.mu[At(out, b, o, y, x)];
                sv += ma * ma * delta_z.var[At(out, b, o, y, x)];
              }
            }
          }
          const size_t k = WeightAt(in, w, o, c, i, j);
          d.mu_w[k] = p.var_w[k] * sm;
          d.var_w[k] = p.var_w[k] * p.var_w[k] * sv;
        }
      }
    }
  }
  if (!p.bias) return d;
  d.mu_b.assign(p.c_out, 0.0);
  d.var_b.assign(p.c_out, 0.0);
  for (int o = 0; o < out.channels; ++o) {
    double sm = 0.0, sv = 0.0;
    for (int b = 0; b < batch; ++b) {
      for (int y = 0; y < out.height; ++y) {
        for (int x = 0; x < out.width; ++x) {
          sm += delta_z.mu[At(out, b, o, y, x)];
          sv += delta_z.var[At(out, b, o, y, x)];
        }
      }
    }
    d.mu_b[o] = p.var_b[o] * sm;
    d.var_b[o] = p.var_b[o] * p.var_b[o] * sv;
  }
  return d;
}

// ---------------------------------------------------------------------------
// AvgPool2d (docs/maths.md section 11.1). K = k^2 counts the padding cells.

// mu_z = (1/K) * sum mu_a, var_z = (1/K^2) * sum var_a over the window's
// non-padding cells. Returns [batch][C][H_o][W_o].
inline Gaussians AvgPoolForward(const Geometry& in, const Window& w, const Gaussians& a,
                                int batch) {
  RequireSize(a, batch * in.size(), "avgpool input size");
  const Geometry out = WindowOutput(in, w, in.channels);
  const double kk = static_cast<double>(w.kernel) * w.kernel;
  Gaussians z = Zeros(batch * out.size());
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < in.channels; ++c) {
      for (int y = 0; y < out.height; ++y) {
        for (int x = 0; x < out.width; ++x) {
          double sm = 0.0, sv = 0.0;
          for (int i = 0; i < w.kernel; ++i) {
            for (int j = 0; j < w.kernel; ++j) {
              int r, t;
              if (!Source(in, w, y, x, i, j, &r, &t)) continue;
              sm += a.mu[At(in, b, c, r, t)];
              sv += a.var[At(in, b, c, r, t)];
            }
          }
          z.mu[At(out, b, c, y, x)] = sm / kk;
          z.var[At(out, b, c, y, x)] = sv / (kk * kk);
        }
      }
    }
  }
  return z;
}

// delta_mu_a[i]  = jcb_a[i]/K     * sum over windows containing i of delta_mu_z
// delta_var_a[i] = jcb_a[i]^2/K^2 * sum over windows containing i of delta_var_z
inline Gaussians AvgPoolBackwardInput(const Geometry& in, const Window& w,
                                      const std::vector<double>& jcb_a, const Gaussians& delta_z,
                                      int batch) {
  const Geometry out = WindowOutput(in, w, in.channels);
  Require(jcb_a.size() == batch * in.size(), "avgpool jcb size");
  RequireSize(delta_z, batch * out.size(), "avgpool output delta size");
  const double kk = static_cast<double>(w.kernel) * w.kernel;
  Gaussians d = Zeros(batch * in.size());
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < in.channels; ++c) {
      for (int r = 0; r < in.height; ++r) {
        for (int t = 0; t < in.width; ++t) {
          double sm = 0.0, sv = 0.0;
          for (int i = 0; i < w.kernel; ++i) {
            for (int j = 0; j < w.kernel; ++j) {
              int y, x;
              if (!Reader(out, w, r, t, i, j, &y, &x)) continue;
              sm += delta_z.mu[At(out, b, c, y, x)];
              sv += delta_z.var[At(out, b, c, y, x)];
            }
          }
          const double jcb = jcb_a[At(in, b, c, r, t)];
          d.mu[At(in, b, c, r, t)] = jcb / kk * sm;
          d.var[At(in, b, c, r, t)] = jcb * jcb / (kk * kk) * sv;
        }
      }
    }
  }
  return d;
}

// ---------------------------------------------------------------------------
// MaxPool2d (docs/maths.md section 11.2).

struct MaxPoolResult {
  Gaussians z;  // [batch][C][H_o][W_o]
  // Per output element, the flat index into the [batch][C][H][W] input of the
  // selected cell m(w); -1 for a window made only of padding (its output is
  // 0 and it routes nothing back).
  std::vector<int64_t> index;
};

// m(w) is the first non-padding cell in scan order (kk = i*k + j increasing)
// whose mean is strictly greater than every earlier one's: the argmax of the
// means, ties to the earliest. The output copies that cell's mean and
// variance; the input variances play no part in the choice.
inline MaxPoolResult MaxPoolForward(const Geometry& in, const Window& w, const Gaussians& a,
                                    int batch) {
  RequireSize(a, batch * in.size(), "maxpool input size");
  const Geometry out = WindowOutput(in, w, in.channels);
  MaxPoolResult res{Zeros(batch * out.size()), std::vector<int64_t>(batch * out.size(), -1)};
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < in.channels; ++c) {
      for (int y = 0; y < out.height; ++y) {
        for (int x = 0; x < out.width; ++x) {
          int64_t best = -1;
          for (int i = 0; i < w.kernel; ++i) {
            for (int j = 0; j < w.kernel; ++j) {
              int r, t;
              if (!Source(in, w, y, x, i, j, &r, &t)) continue;
              const auto cell = static_cast<int64_t>(At(in, b, c, r, t));
              if (best < 0 || a.mu[cell] > a.mu[best]) best = cell;
            }
          }
          const size_t o = At(out, b, c, y, x);
          res.index[o] = best;
          if (best < 0) continue;
          res.z.mu[o] = a.mu[best];
          res.z.var[o] = a.var[best];
        }
      }
    }
  }
  return res;
}

// delta_mu_a[i]  = jcb_a[i]   * sum over windows w with m(w) = i of delta_mu_z[w]
// delta_var_a[i] = jcb_a[i]^2 * sum over windows w with m(w) = i of delta_var_z[w]
// (0 for cells no window selected). `index` as returned by MaxPoolForward.
inline Gaussians MaxPoolBackwardInput(const Geometry& in, const Window& w,
                                      const std::vector<int64_t>& index,
                                      const std::vector<double>& jcb_a, const Gaussians& delta_z,
                                      int batch) {
  const Geometry out = WindowOutput(in, w, in.channels);
  Require(jcb_a.size() == batch * in.size(), "maxpool jcb size");
  RequireSize(delta_z, batch * out.size(), "maxpool output delta size");
  Require(index.size() == batch * out.size(), "maxpool index size");
  Gaussians sum = Zeros(batch * in.size());
  for (size_t o = 0; o < index.size(); ++o) {
    if (index[o] < 0) continue;
    Require(static_cast<size_t>(index[o]) < sum.mu.size(), "maxpool index out of range");
    sum.mu[index[o]] += delta_z.mu[o];
    sum.var[index[o]] += delta_z.var[o];
  }
  Gaussians d = Zeros(batch * in.size());
  for (size_t k = 0; k < d.mu.size(); ++k) {
    d.mu[k] = jcb_a[k] * sum.mu[k];
    d.var[k] = jcb_a[k] * jcb_a[k] * sum.var[k];
  }
  return d;
}

// ---------------------------------------------------------------------------
// Normalisation layers (docs/maths.md section 12).

// gamma = (mu_w, var_w), beta = (mu_b, var_b); one entry per channel of the
// input geometry (per feature for Geometry{F, 1, 1}). Without bias the beta
// vectors are ignored (may be empty).
struct NormParams {
  std::vector<double> mu_w, var_w, mu_b, var_b;
  bool bias = true;
};

// Normalisation statistics: per channel for BatchNorm, per sample for
// LayerNorm.
struct NormStats {
  std::vector<double> mu, var;
};

struct NormForward {
  Gaussians z;
  NormStats stats;  // the statistics the forward normalised with
};

inline void RequireNorm(const NormParams& p, const Geometry& in) {
  const auto n = static_cast<size_t>(in.channels);
  Require(p.mu_w.size() == n && p.var_w.size() == n, "norm gamma sizes");
  Require(!p.bias || (p.mu_b.size() == n && p.var_b.size() == n), "norm beta sizes");
}

// Which statistic normalises element (b, c, ...): BatchNorm's channel c,
// LayerNorm's sample b.
enum class StatsOf { kChannel, kSample };

inline size_t StatIndex(StatsOf by, int b, int c) {
  return static_cast<size_t>(by == StatsOf::kChannel ? c : b);
}

// mu_s = (1/n) * sum mu_a; var_s = (sum (mu_a - mu_s)^2 + sum var_a) / (n - 1)
// over a set of n elements given by their flat indices.
inline void SampleStats(const Gaussians& a, const std::vector<size_t>& set, double* mu_s,
                        double* var_s) {
  const auto n = static_cast<double>(set.size());
  Require(set.size() >= 2, "normalisation statistics need at least 2 values (n - 1 divisor)");
  double sum = 0.0;
  for (size_t k : set) sum += a.mu[k];
  *mu_s = sum / n;
  double squares = 0.0, epistemic = 0.0;
  for (size_t k : set) {
    squares += (a.mu[k] - *mu_s) * (a.mu[k] - *mu_s);
    epistemic += a.var[k];
  }
  *var_s = (squares + epistemic) / (n - 1.0);
}

// With r = 1/sqrt(var_hat + eps), a~ = mu_a - mu_hat (section 6):
// mu_z  = r*a~*mu_g + mu_b
// var_z = r^2*(var_a*(mu_g^2 + var_g) + var_g*a~^2) + var_b
inline Gaussians Normalize(const NormParams& p, const Geometry& in, const Gaussians& a,
                           const NormStats& s, StatsOf by, double eps, int batch) {
  RequireNorm(p, in);
  RequireSize(a, batch * in.size(), "norm input size");
  Gaussians z = Zeros(batch * in.size());
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < in.channels; ++c) {
      const size_t si = StatIndex(by, b, c);
      const double r = 1.0 / std::sqrt(s.var[si] + eps);
      for (int y = 0; y < in.height; ++y) {
        for (int x = 0; x < in.width; ++x) {
          const size_t k = At(in, b, c, y, x);
          const double at = a.mu[k] - s.mu[si];
          const double mg = p.mu_w[c], vg = p.var_w[c];
          z.mu[k] = r * at * mg;
          z.var[k] = r * r * (a.var[k] * (mg * mg + vg) + vg * at * at);
          if (p.bias) {
            z.mu[k] += p.mu_b[c];
            z.var[k] += p.var_b[c];
          }
        }
      }
    }
  }
  return z;
}

// delta_mu_a  = r*mu_g*jcb_a     * delta_mu_z
// delta_var_a = (r*mu_g*jcb_a)^2 * delta_var_z      (statistics held constant)
inline Gaussians NormBackwardInput(const NormParams& p, const Geometry& in, const NormStats& s,
                                   StatsOf by, double eps, const std::vector<double>& jcb_a,
                                   const Gaussians& delta_z, int batch) {
  RequireNorm(p, in);
  Require(jcb_a.size() == batch * in.size(), "norm jcb size");
  RequireSize(delta_z, batch * in.size(), "norm output delta size");
  Gaussians d = Zeros(batch * in.size());
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < in.channels; ++c) {
      const double r = 1.0 / std::sqrt(s.var[StatIndex(by, b, c)] + eps);
      for (int y = 0; y < in.height; ++y) {
        for (int x = 0; x < in.width; ++x) {
          const size_t k = At(in, b, c, y, x);
          const double g = r * p.mu_w[c] * jcb_a[k];
          d.mu[k] = g * delta_z.mu[k];
          d.var[k] = g * g * delta_z.var[k];
        }
      }
    }
  }
  return d;
}

// delta_mu_g[c]  = sum (r*a~*var_g[c])   * delta_mu_z
// delta_var_g[c] = sum (r*a~*var_g[c])^2 * delta_var_z
// delta_mu_b[c]  = sum var_b[c]   * delta_mu_z
// delta_var_b[c] = sum var_b[c]^2 * delta_var_z
// summed over every element of channel c (all b, y, x). Only a.mu is read.
inline ParamDeltas NormBackwardParams(const NormParams& p, const Geometry& in, const NormStats& s,
                                      StatsOf by, double eps, const Gaussians& a,
                                      const Gaussians& delta_z, int batch) {
  RequireNorm(p, in);
  Require(a.mu.size() == batch * in.size(), "norm input size");
  RequireSize(delta_z, batch * in.size(), "norm output delta size");
  ParamDeltas d;
  d.mu_w.assign(in.channels, 0.0);
  d.var_w.assign(in.channels, 0.0);
  if (p.bias) {
    d.mu_b.assign(in.channels, 0.0);
    d.var_b.assign(in.channels, 0.0);
  }
  for (int c = 0; c < in.channels; ++c) {
    for (int b = 0; b < batch; ++b) {
      const size_t si = StatIndex(by, b, c);
      const double r = 1.0 / std::sqrt(s.var[si] + eps);
      for (int y = 0; y < in.height; ++y) {
        for (int x = 0; x < in.width; ++x) {
          const size_t k = At(in, b, c, y, x);
          const double g = r * (a.mu[k] - s.mu[si]) * p.var_w[c];
          d.mu_w[c] += g * delta_z.mu[k];
          d.var_w[c] += g * g * delta_z.var[k];
          if (p.bias) {
            d.mu_b[c] += p.var_b[c] * delta_z.mu[k];
            d.var_b[c] += p.var_b[c] * p.var_b[c] * delta_z.var[k];
          }
        }
      }
    }
  }
  return d;
}

// --- BatchNorm (section 6) ---

// Running statistics of one BatchNorm, and whether the next training
// forward is its first (which then replaces them: momentum 0, B1 fixed).
struct RunningStats {
  std::vector<double> mu, var;
  bool first_batch = true;
};

// The initial running statistics: mu_ra = 0, var_ra = 1.
inline RunningStats InitialRunningStats(int channels) {
  return {std::vector<double>(channels, 0.0), std::vector<double>(channels, 1.0), true};
}

// Batch statistics per channel c over its n elements (all b, y, x; n = B*H*W,
// or n = B for a flat input): mu_s and var_s with the epistemic sum and the
// n - 1 divisor.
inline NormStats BatchNormStatistics(const Geometry& in, const Gaussians& a, int batch) {
  RequireSize(a, batch * in.size(), "batchnorm input size");
  NormStats s{std::vector<double>(in.channels), std::vector<double>(in.channels)};
  for (int c = 0; c < in.channels; ++c) {
    std::vector<size_t> set;
    for (int b = 0; b < batch; ++b) {
      for (int y = 0; y < in.height; ++y) {
        for (int x = 0; x < in.width; ++x) set.push_back(At(in, b, c, y, x));
      }
    }
    SampleStats(a, set, &s.mu[c], &s.var[c]);
  }
  return s;
}

// mu_ra <- m*mu_ra + (1 - m)*mu_s, var_ra <- m*var_ra + (1 - m)*var_s with
// m = 0 on the first training batch, else `momentum` (the old value's
// weight, 0.9 by default).
inline void UpdateRunningStats(const NormStats& batch_stats, double momentum,
                               RunningStats* running) {
  Require(
      running->mu.size() == batch_stats.mu.size() && running->var.size() == batch_stats.var.size(),
      "running statistics sizes");
  const double m = running->first_batch ? 0.0 : momentum;
  for (size_t c = 0; c < running->mu.size(); ++c) {
    running->mu[c] = m * running->mu[c] + (1.0 - m) * batch_stats.mu[c];
    running->var[c] = m * running->var[c] + (1.0 - m) * batch_stats.var[c];
  }
  running->first_batch = false;
}

// Training forward: batch statistics, running update (before normalising),
// then normalisation with the batch statistics (returned in .stats; backward
// takes them).
inline NormForward BatchNormTrainForward(const NormParams& p, const Geometry& in,
                                         const Gaussians& a, int batch, double eps, double momentum,
                                         RunningStats* running) {
  NormForward f;
  f.stats = BatchNormStatistics(in, a, batch);
  UpdateRunningStats(f.stats, momentum, running);
  f.z = Normalize(p, in, a, f.stats, StatsOf::kChannel, eps, batch);
  return f;
}

// Eval forward: normalisation with the running statistics; updates nothing
// (in particular it leaves `first_batch` as it is).
inline Gaussians BatchNormEvalForward(const NormParams& p, const Geometry& in, const Gaussians& a,
                                      int batch, double eps, const RunningStats& running) {
  return Normalize(p, in, a, {running.mu, running.var}, StatsOf::kChannel, eps, batch);
}

// Backward with the statistics of the last training batch (per channel).
inline Gaussians BatchNormBackwardInput(const NormParams& p, const Geometry& in,
                                        const NormStats& batch_stats, double eps,
                                        const std::vector<double>& jcb_a, const Gaussians& delta_z,
                                        int batch) {
  return NormBackwardInput(p, in, batch_stats, StatsOf::kChannel, eps, jcb_a, delta_z, batch);
}

inline ParamDeltas BatchNormBackwardParams(const NormParams& p, const Geometry& in,
                                           const NormStats& batch_stats, double eps,
                                           const Gaussians& a, const Gaussians& delta_z,
                                           int batch) {
  return NormBackwardParams(p, in, batch_stats, StatsOf::kChannel, eps, a, delta_z, batch);
}

// --- LayerNorm (section 7) ---

// Per-sample statistics over its F = C*H*W values (n - 1 = F - 1 divisor,
// epistemic sum included).
inline NormStats LayerNormStatistics(const Geometry& in, const Gaussians& a, int batch) {
  RequireSize(a, batch * in.size(), "layernorm input size");
  NormStats s{std::vector<double>(batch), std::vector<double>(batch)};
  for (int b = 0; b < batch; ++b) {
    std::vector<size_t> set;
    for (size_t f = 0; f < in.size(); ++f) set.push_back(b * in.size() + f);
    SampleStats(a, set, &s.mu[b], &s.var[b]);
  }
  return s;
}

// Forward (training and eval alike): normalise every sample by its own
// statistics, gamma/beta per channel (or per feature for a flat input).
inline NormForward LayerNormForward(const NormParams& p, const Geometry& in, const Gaussians& a,
                                    int batch, double eps) {
  NormForward f;
  f.stats = LayerNormStatistics(in, a, batch);
  f.z = Normalize(p, in, a, f.stats, StatsOf::kSample, eps, batch);
  return f;
}

inline Gaussians LayerNormBackwardInput(const NormParams& p, const Geometry& in,
                                        const NormStats& sample_stats, double eps,
                                        const std::vector<double>& jcb_a, const Gaussians& delta_z,
                                        int batch) {
  return NormBackwardInput(p, in, sample_stats, StatsOf::kSample, eps, jcb_a, delta_z, batch);
}

inline ParamDeltas LayerNormBackwardParams(const NormParams& p, const Geometry& in,
                                           const NormStats& sample_stats, double eps,
                                           const Gaussians& a, const Gaussians& delta_z,
                                           int batch) {
  return NormBackwardParams(p, in, sample_stats, StatsOf::kSample, eps, a, delta_z, batch);
}

// ---------------------------------------------------------------------------
// The capped step (docs/maths.md section 7).

inline constexpr double kVarianceFloor = 1e-5;

// 0.1 for B = 1, 2 for 2 <= B <= 255, 3 for B >= 256.
inline double CapFactor(int batch) {
  if (batch <= 1) return 0.1;
  return batch <= 255 ? 2.0 : 3.0;
}

// For every theta: cap = sqrt(var_theta)/cap_factor (the prior variance);
// mu += sign(d_mu)*min(|d_mu|, cap); var += sign(d_var)*min(|d_var|, cap);
// then var <= 0 becomes kVarianceFloor.
inline void CappedStep(const std::vector<double>& delta_mu, const std::vector<double>& delta_var,
                       double cap_factor, std::vector<double>* mu, std::vector<double>* var) {
  Require(
      delta_mu.size() == mu->size() && delta_var.size() == var->size() && mu->size() == var->size(),
      "step sizes");
  for (size_t k = 0; k < mu->size(); ++k) {
    const double cap = std::sqrt((*var)[k]) / cap_factor;
    const double dm = delta_mu[k], dv = delta_var[k];
    (*mu)[k] += (dm < 0.0 ? -1.0 : 1.0) * std::min(std::abs(dm), cap);
    (*var)[k] += (dv < 0.0 ? -1.0 : 1.0) * std::min(std::abs(dv), cap);
    if ((*var)[k] <= 0.0) (*var)[k] = kVarianceFloor;
  }
}

// The step on all four parameter vectors of a layer (biases only with bias).
template <typename Params>
void ApplyStep(const ParamDeltas& d, double cap_factor, Params* p) {
  CappedStep(d.mu_w, d.var_w, cap_factor, &p->mu_w, &p->var_w);
  if (p->bias) CappedStep(d.mu_b, d.var_b, cap_factor, &p->mu_b, &p->var_b);
}

}  // namespace tagi::ref

#endif  // TAGI_TESTS_ENGINE_CNN_REFERENCE_H_
