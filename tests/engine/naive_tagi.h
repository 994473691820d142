// NaiveTagi: an independent, plain double-precision implementation of one
// TAGI training step, written line by line from docs/maths.md for the
// engine tests. It shares no code with the engine: it reads the parameters
// from a copy of a model arena using the layout documented in model.h
// ([mu N][var N]; per LINEAR layer, weights [out][in] row-major, then
// biases), runs the forward pass (section 3), the output update at the last
// LINEAR layer's pre-activation (section 4, with J folded in as written
// there), the backward pass (section 6) and the capped step (section 7).
// Test-only; not thread-safe.
#ifndef TAGI_TESTS_ENGINE_NAIVE_TAGI_H_
#define TAGI_TESTS_ENGINE_NAIVE_TAGI_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <set>
#include <span>
#include <vector>

#include "tests/engine/naive_heads.h"

#include "worker/engine/architecture.h"

namespace tagi::engine::testing {

// docs/maths.md section 5.1, derived from the text: level l holds one node per
// distinct l-bit prefix of the labels' L-bit codes, numbered level by level
// in increasing prefix order; target +1 for a next bit 0, -1 for a 1.
struct HsmCode {
  std::vector<int> nodes;  // 0-based output indices
  std::vector<double> targets;
};
inline HsmCode EncodeHsmLabel(int num_classes, int label) {
  int levels = 0;
  while ((1 << levels) < num_classes) ++levels;
  HsmCode code;
  int offset = 0;
  for (int l = 0; l < levels; ++l) {
    std::set<int> prefixes;
    for (int r = 0; r < num_classes; ++r) prefixes.insert(r >> (levels - l));
    const int prefix = label >> (levels - l);
    code.nodes.push_back(offset +
                         static_cast<int>(std::distance(prefixes.begin(), prefixes.find(prefix))));
    code.targets.push_back(((label >> (levels - 1 - l)) & 1) == 0 ? 1.0 : -1.0);
    offset += static_cast<int>(prefixes.size());
  }
  return code;
}

// docs/maths.md section 7, cap factor by batch size.
inline double NaiveCapFactor(size_t batch) {
  if (batch <= 1) return 0.1;
  return batch <= 255 ? 2.0 : 3.0;
}

class NaiveTagi {
 public:
  // REQUIRES: arch alternates LINEAR and at most one activation.
  NaiveTagi(const Architecture& arch, std::span<const float> arena) : arch_(arch) {
    const size_t n = arena.size() / 2;
    size_t offset = 0;
    for (const LayerDesc& d : arch.layers) {
      if (d.kind != v1::Layer::LINEAR) continue;
      Params p;
      p.in = d.in;
      p.out = d.out;
      p.offset = offset;
      const size_t nw = size_t{d.in} * d.out;
      for (size_t k = 0; k < nw; ++k) {
        p.mw.push_back(arena[offset + k]);
        p.vw.push_back(arena[n + offset + k]);
      }
      for (size_t o = 0; o < d.out; ++o) {
        p.mb.push_back(arena[offset + nw + o]);
        p.vb.push_back(arena[n + offset + nw + o]);
      }
      offset += nw + d.out;
      linears_.push_back(p);
    }
    num_params_ = offset;
  }

  // The smallest |mu_z| that entered a RELU or LEAKY_RELU in the last
  // forward pass: near zero, float and double may take different branches.
  double relu_margin() const { return relu_margin_; }

  // Forward pass; returns the output boundary's means and variances.
  void Forward(const float* x, size_t batch) {
    batch_ = batch;
    relu_margin_ = std::numeric_limits<double>::infinity();
    units_.clear();
    Boundary input;
    input.mu.assign(x, x + batch * arch_.input_width());
    input.var.assign(input.mu.size(), 0.0);  // the data carry no variance
    input.jcb.assign(input.mu.size(), 1.0);
    units_.push_back(input);
    size_t li = 0;
    for (const LayerDesc& d : arch_.layers) {
      const Boundary& a = units_.back();
      Boundary z;
      if (d.kind == v1::Layer::LINEAR) {
        const Params& p = linears_[li++];
        z.mu.resize(batch * p.out);
        z.var.resize(batch * p.out);
        z.jcb.assign(batch * p.out, 1.0);
        for (size_t b = 0; b < batch; ++b) {
          for (size_t o = 0; o < p.out; ++o) {
            double mu = p.mb[o], var = p.vb[o];
            for (size_t i = 0; i < p.in; ++i) {
              const double mw = p.mw[o * p.in + i], vw = p.vw[o * p.in + i];
              const double ma = a.mu[b * p.in + i], va = a.var[b * p.in + i];
              mu += mw * ma;
              var += (mw * mw + vw) * va + vw * ma * ma;
            }
            z.mu[b * p.out + o] = mu;
            z.var[b * p.out + o] = var;
          }
        }
      } else if (d.kind == v1::Layer::REMAX || d.kind == v1::Layer::CLOSED_FORM_SOFTMAX) {
        z = a;
        const size_t k = a.mu.size() / batch;
        for (size_t b = 0; b < batch; ++b) {
          const std::vector<double> mz(a.mu.begin() + b * k, a.mu.begin() + (b + 1) * k);
          const std::vector<double> vz(a.var.begin() + b * k, a.var.begin() + (b + 1) * k);
          const NaiveMoments m = d.kind == v1::Layer::REMAX ? NaiveRemax(mz, vz)
                                                            : NaiveClosedFormSoftmax(mz, vz);
          std::copy(m.mu.begin(), m.mu.end(), z.mu.begin() + b * k);
          std::copy(m.var.begin(), m.var.end(), z.var.begin() + b * k);
          std::copy(m.jcb.begin(), m.jcb.end(), z.jcb.begin() + b * k);
        }
      } else if (d.kind == v1::Layer::EVEN_EXP) {
        z = a;
        for (size_t k = 0; k < a.mu.size(); ++k) {
          NaiveEvenExp(k, a.mu[k], a.var[k], a.jcb[k], &z.mu[k], &z.var[k], &z.jcb[k]);
        }
      } else {
        z = a;
        for (size_t k = 0; k < a.mu.size(); ++k) {
          Activate(d, a.mu[k], a.var[k], &z.mu[k], &z.var[k], &z.jcb[k]);
        }
      }
      units_.push_back(std::move(z));
    }
  }

  const std::vector<double>& output_mu() const { return units_.back().mu; }
  const std::vector<double>& output_var() const { return units_.back().var; }

  // Forward, output update and backward; fills the parameter deltas.
  // Classification when labels is non-null, else regression on targets.
  void TrainStep(const float* x, const int32_t* labels, const float* targets, size_t batch,
                 double sigma_v) {
    Forward(x, batch);
    const size_t last = arch_.layers.size();
    const bool ends_in_activation = arch_.layers.back().kind != v1::Layer::LINEAR;
    // Boundary holding the last LINEAR layer's z, and the output a.
    const size_t zb = ends_in_activation ? last - 1 : last;
    const Boundary& out = units_[last];
    const size_t width = arch_.output_width();
    const double v = sigma_v * sigma_v;
    std::vector<double> dmu(batch * width, 0.0), dvar(batch * width, 0.0);
    auto observe = [&](size_t k, double y) {
      // docs/maths.md section 4: k = J / (var_a + V), dmu = k (y - mu_a), dvar = -k J.
      if (std::isnan(y)) return;
      const double jcb = ends_in_activation ? out.jcb[k] : 1.0;
      const double gain = jcb / (out.var[k] + v);
      if (!std::isfinite(gain)) return;
      dmu[k] = gain * (y - out.mu[k]);
      dvar[k] = -gain * jcb;
    };
    if (arch_.head.heteroscedastic) {
      // docs/maths.md section 5.5, each target against its [mean, noise] pair.
      for (size_t t = 0; t < batch * width / 2; ++t) {
        double d[4];
        NaiveHeteroscedastic(out.mu[2 * t], out.var[2 * t], out.jcb[2 * t], out.mu[2 * t + 1],
                             out.var[2 * t + 1], out.jcb[2 * t + 1], targets[t], d);
        dmu[2 * t] = d[0];
        dvar[2 * t] = d[1];
        dmu[2 * t + 1] = d[2];
        dvar[2 * t + 1] = d[3];
      }
      Backward(zb, std::move(dmu), std::move(dvar));
      return;
    }
    for (size_t b = 0; b < batch; ++b) {
      if (labels != nullptr && arch_.head.one_hot) {
        for (size_t o = 0; o < width; ++o) {
          observe(b * width + o, static_cast<int>(o) == labels[b] ? 1.0 : 0.0);
        }
      } else if (labels != nullptr) {
        const HsmCode code = EncodeHsmLabel(static_cast<int>(arch_.head.num_classes), labels[b]);
        for (size_t l = 0; l < code.nodes.size(); ++l) {
          observe(b * width + code.nodes[l], code.targets[l]);
        }
      } else {
        for (size_t o = 0; o < width; ++o) observe(b * width + o, targets[b * width + o]);
      }
    }
    Backward(zb, std::move(dmu), std::move(dvar));
  }

  // docs/maths.md section 7.
  void ApplyStep(double cap_factor) {
    auto step = [cap_factor](double& mu, double& var, double dmu, double dvar) {
      const double cap = std::sqrt(var) / cap_factor;
      mu += (dmu < 0 ? -1.0 : 1.0) * std::min(std::abs(dmu), cap);
      var += (dvar < 0 ? -1.0 : 1.0) * std::min(std::abs(dvar), cap);
      if (var <= 0.0) var = 1e-5;
    };
    for (Params& p : linears_) {
      for (size_t k = 0; k < p.mw.size(); ++k) step(p.mw[k], p.vw[k], p.dmw[k], p.dvw[k]);
      for (size_t o = 0; o < p.out; ++o) step(p.mb[o], p.vb[o], p.dmb[o], p.dvb[o]);
    }
  }

  // [mu N][var N] in the model's layout.
  std::vector<double> Parameters() const { return Flatten(false); }
  std::vector<double> Deltas() const { return Flatten(true); }

 private:
  struct Boundary {
    std::vector<double> mu, var, jcb;
  };
  struct Params {
    size_t in = 0, out = 0, offset = 0;
    std::vector<double> mw, vw, mb, vb;
    std::vector<double> dmw, dvw, dmb, dvb;
  };

  void Activate(const LayerDesc& d, double mz, double vz, double* ma, double* va, double* jcb) {
    switch (d.kind) {
      case v1::Layer::RELU:
      case v1::Layer::LEAKY_RELU: {
        relu_margin_ = std::min(relu_margin_, std::abs(mz));
        const double slope = mz > 0 ? 1.0 : (d.kind == v1::Layer::RELU ? 0.0 : d.slope);
        *ma = slope * mz;
        *va = slope * slope * vz;
        *jcb = slope;
        return;
      }
      case v1::Layer::SIGMOID: {
        const double s = 1.0 / (1.0 + std::exp(-mz));
        *ma = s;
        *jcb = s * (1.0 - s);
        *va = *jcb * *jcb * vz;
        return;
      }
      case v1::Layer::TANH: {
        *ma = std::tanh(mz);
        *jcb = 1.0 - *ma * *ma;
        *va = *jcb * *jcb * vz;
        return;
      }
      case v1::Layer::SOFTPLUS: {
        *ma = std::log1p(std::exp(mz));
        *jcb = 1.0 / (1.0 + std::exp(-mz));
        *va = *jcb * *jcb * vz;
        return;
      }
      case v1::Layer::MIXTURE_RELU: {
        const double sd = std::sqrt(vz);
        const double alpha = mz / sd;
        const double cdf = 0.5 * std::erfc(-alpha / std::sqrt(2.0));
        const double pdf = std::exp(-0.5 * alpha * alpha) / std::sqrt(2.0 * M_PI);
        const double m = mz * cdf + sd * pdf;
        const double second = (mz * mz + vz) * cdf + mz * sd * pdf;
        *ma = std::max(m, 1e-6);
        *va = std::max(second - m * m, 1e-6);
        *jcb = cdf;
        return;
      }
      case v1::Layer::LINEAR:
        break;
    }
  }

  // dmu/dvar: innovations of the pre-activation z at boundary zb, which is
  // the output of LINEAR layer zb - 1.
  void Backward(size_t zb, std::vector<double> dmu, std::vector<double> dvar) {
    size_t li = linears_.size();
    for (size_t layer = zb; layer-- > 0;) {
      if (arch_.layers[layer].kind != v1::Layer::LINEAR) continue;
      Params& p = linears_[--li];
      const Boundary& a = units_[layer];  // input of this LINEAR
      p.dmw.assign(p.mw.size(), 0.0);
      p.dvw.assign(p.vw.size(), 0.0);
      p.dmb.assign(p.out, 0.0);
      p.dvb.assign(p.out, 0.0);
      // docs/maths.md section 6: sums over the batch against the same prior.
      for (size_t o = 0; o < p.out; ++o) {
        for (size_t i = 0; i < p.in; ++i) {
          double sm = 0.0, sv = 0.0;
          for (size_t b = 0; b < batch_; ++b) {
            const double ma = a.mu[b * p.in + i];
            sm += ma * dmu[b * p.out + o];
            sv += ma * ma * dvar[b * p.out + o];
          }
          const double vw = p.vw[o * p.in + i];
          p.dmw[o * p.in + i] = vw * sm;
          p.dvw[o * p.in + i] = vw * vw * sv;
        }
        double sm = 0.0, sv = 0.0;
        for (size_t b = 0; b < batch_; ++b) {
          sm += dmu[b * p.out + o];
          sv += dvar[b * p.out + o];
        }
        p.dmb[o] = p.vb[o] * sm;
        p.dvb[o] = p.vb[o] * p.vb[o] * sv;
      }
      if (layer == 0) break;
      // Innovations of the previous LINEAR's z, through the activation in
      // front of this layer (jcb at boundary `layer`).
      std::vector<double> pmu(batch_ * p.in), pvar(batch_ * p.in);
      for (size_t b = 0; b < batch_; ++b) {
        for (size_t i = 0; i < p.in; ++i) {
          const double jcb = a.jcb[b * p.in + i];
          double sm = 0.0, sv = 0.0;
          for (size_t o = 0; o < p.out; ++o) {
            const double mw = p.mw[o * p.in + i];
            sm += mw * dmu[b * p.out + o];
            sv += mw * mw * dvar[b * p.out + o];
          }
          pmu[b * p.in + i] = jcb * sm;
          pvar[b * p.in + i] = jcb * jcb * sv;
        }
      }
      dmu = std::move(pmu);
      dvar = std::move(pvar);
    }
  }

  std::vector<double> Flatten(bool deltas) const {
    std::vector<double> arena(2 * num_params_);
    for (const Params& p : linears_) {
      const auto& mw = deltas ? p.dmw : p.mw;
      const auto& vw = deltas ? p.dvw : p.vw;
      const auto& mb = deltas ? p.dmb : p.mb;
      const auto& vb = deltas ? p.dvb : p.vb;
      for (size_t k = 0; k < mw.size(); ++k) {
        arena[p.offset + k] = mw[k];
        arena[num_params_ + p.offset + k] = vw[k];
      }
      for (size_t o = 0; o < mb.size(); ++o) {
        arena[p.offset + mw.size() + o] = mb[o];
        arena[num_params_ + p.offset + mw.size() + o] = vb[o];
      }
    }
    return arena;
  }

  Architecture arch_;
  std::vector<Params> linears_;
  std::vector<Boundary> units_;
  size_t num_params_ = 0;
  size_t batch_ = 0;
  double relu_margin_ = 0.0;
};

}  // namespace tagi::engine::testing

#endif  // TAGI_TESTS_ENGINE_NAIVE_TAGI_H_
