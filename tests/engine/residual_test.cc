// Residual networks on the CPU Model against a plain double-precision
// reference written from docs/maths.md section 13 (and sections 3-7 for
// the layers inside): forward moments, parameter deltas and the stepped
// parameters, for blocks with identity and projection shortcuts, a block
// first on the data, nested blocks and a one-layer block (the reference
// library's bug B8: it never back-propagates; ours must), at B = 1 and B > 1.
//
// The reference uses the reference library's convention: a layer hands
// back innovations already multiplied by its input's jcb, activations are
// skipped in backward, and the identity shortcut applies jcb_x itself.
#include <cmath>
#include <map>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"
#include "worker/engine/model.h"

namespace tagi::engine {
namespace {

struct T {  // a batch of Gaussian units and the jcb of their producer
  std::vector<double> mu, var, jcb;
};
struct D {  // innovations
  std::vector<double> mu, var;
};

class Reference {
 public:
  Reference(std::span<const float> arena, size_t batch)
      : n_(arena.size() / 2), p_(arena.begin(), arena.end()), d_(arena.size(), 0.0), b_(batch) {}

  T Forward(const std::vector<LayerDesc>& seq, T x, size_t& offset) {
    for (const LayerDesc& l : seq) {
      cache_[&l] = {x, offset};
      if (l.kind == v1::Layer::LINEAR) {
        x = Linear(l, x, offset);
        offset += size_t{l.in} * l.out + l.out;
      } else if (l.kind == v1::Layer::RESIDUAL) {
        const T m = Forward(l.main, x, offset);
        const T s = l.shortcut.empty() ? x : Forward(l.shortcut, x, offset);
        cache_[&l].main_jcb = m.jcb;
        cache_[&l].shortcut_jcb = s.jcb;
        T out{m.mu, m.var, std::vector<double>(m.mu.size(), 1.0)};
        for (size_t i = 0; i < out.mu.size(); ++i) {
          out.mu[i] += s.mu[i];  // independent branches: means and variances add
          out.var[i] += s.var[i];
        }
        x = out;
      } else {
        x = Activate(l, x);
      }
    }
    return x;
  }

  // Innovations for the input of `seq`; none when it reads the data.
  D Backward(const std::vector<LayerDesc>& seq, D d, bool reads_data) {
    for (size_t i = seq.size(); i-- > 0;) {
      const LayerDesc& l = seq[i];
      const bool data = reads_data && i == 0;
      const T& x = cache_[&l].input;
      if (l.kind == v1::Layer::LINEAR) {
        d = LinearBackward(l, x, d, cache_[&l].offset, data);
      } else if (l.kind == v1::Layer::RESIDUAL) {
        // Both branches receive the block's innovations; the merge, as the
        // consumer of each branch's output, applies that output's jcb (1
        // unless the branch ends in an activation: the reference library's
        // branches end in a BatchNorm, and its text says "unchanged"); so
        // the identity applies jcb_x. The two results add.
        const Cache& c = cache_[&l];
        D m = Backward(l.main, Scaled(d, c.main_jcb), data);
        D s = l.shortcut.empty() ? Scaled(d, x.jcb) : Backward(l.shortcut, Scaled(d, c.shortcut_jcb), data);
        if (!data) {
          for (size_t k = 0; k < m.mu.size(); ++k) {
            m.mu[k] += s.mu[k];
            m.var[k] += s.var[k];
          }
        }
        d = m;
      }  // activations: skipped (their jcb was applied by the layer after them)
    }
    return d;
  }

  void Step(double cap_factor) {
    for (size_t k = 0; k < n_; ++k) {
      const double cap = std::sqrt(p_[n_ + k]) / cap_factor;
      p_[k] += std::clamp(d_[k], -cap, cap);
      p_[n_ + k] += std::clamp(d_[n_ + k], -cap, cap);
      if (p_[n_ + k] <= 0.0) p_[n_ + k] = 1e-5;
    }
  }

  const std::vector<double>& params() const { return p_; }
  const std::vector<double>& deltas() const { return d_; }

 private:
  struct Cache {
    T input;
    size_t offset = 0;
    std::vector<double> main_jcb, shortcut_jcb;  // RESIDUAL: of each branch's output
  };

  static D Scaled(D d, const std::vector<double>& jcb) {
    for (size_t k = 0; k < d.mu.size(); ++k) {
      d.mu[k] *= jcb[k];
      d.var[k] *= jcb[k] * jcb[k];
    }
    return d;
  }

  T Linear(const LayerDesc& l, const T& a, size_t off) {
    T z{std::vector<double>(b_ * l.out), std::vector<double>(b_ * l.out),
        std::vector<double>(b_ * l.out, 1.0)};
    for (size_t b = 0; b < b_; ++b) {
      for (size_t o = 0; o < l.out; ++o) {
        double mu = p_[off + l.in * l.out + o];
        double var = p_[n_ + off + l.in * l.out + o];
        for (size_t i = 0; i < l.in; ++i) {
          const double mw = p_[off + o * l.in + i], vw = p_[n_ + off + o * l.in + i];
          const double ma = a.mu[b * l.in + i], va = a.var[b * l.in + i];
          mu += mw * ma;
          var += (mw * mw + vw) * va + vw * ma * ma;
        }
        z.mu[b * l.out + o] = mu;
        z.var[b * l.out + o] = var;
      }
    }
    return z;
  }

  D LinearBackward(const LayerDesc& l, const T& a, const D& d, size_t off, bool data) {
    for (size_t o = 0; o < l.out; ++o) {
      for (size_t i = 0; i < l.in; ++i) {
        double sm = 0, sv = 0;
        for (size_t b = 0; b < b_; ++b) {
          const double ma = a.mu[b * l.in + i];
          sm += ma * d.mu[b * l.out + o];
          sv += ma * ma * d.var[b * l.out + o];
        }
        const size_t k = off + o * l.in + i;
        d_[k] = p_[n_ + k] * sm;
        d_[n_ + k] = p_[n_ + k] * p_[n_ + k] * sv;
      }
      double sm = 0, sv = 0;
      for (size_t b = 0; b < b_; ++b) {
        sm += d.mu[b * l.out + o];
        sv += d.var[b * l.out + o];
      }
      const size_t k = off + l.in * l.out + o;
      d_[k] = p_[n_ + k] * sm;
      d_[n_ + k] = p_[n_ + k] * p_[n_ + k] * sv;
    }
    D in{std::vector<double>(b_ * l.in), std::vector<double>(b_ * l.in)};
    if (data) return in;
    for (size_t b = 0; b < b_; ++b) {
      for (size_t i = 0; i < l.in; ++i) {
        double sm = 0, sv = 0;
        for (size_t o = 0; o < l.out; ++o) {
          const double mw = p_[off + o * l.in + i];
          sm += mw * d.mu[b * l.out + o];
          sv += mw * mw * d.var[b * l.out + o];
        }
        const double j = a.jcb[b * l.in + i];
        in.mu[b * l.in + i] = j * sm;
        in.var[b * l.in + i] = j * j * sv;
      }
    }
    return in;
  }

  static T Activate(const LayerDesc& l, const T& z) {
    T a = z;
    for (size_t k = 0; k < z.mu.size(); ++k) {
      const double m = z.mu[k], v = z.var[k];
      double f = 0, j = 0;
      if (l.kind == v1::Layer::TANH) {
        f = std::tanh(m);
        j = 1 - f * f;
      } else if (l.kind == v1::Layer::SIGMOID) {
        f = 1 / (1 + std::exp(-m));
        j = f * (1 - f);
      } else {  // MIXTURE_RELU: the rectified Gaussian (docs/maths.md section 3)
        const double sd = std::sqrt(v), al = m / sd;
        const double cdf = 0.5 * std::erfc(-al / std::sqrt(2.0));
        const double pdf = std::exp(-0.5 * al * al) / std::sqrt(2 * M_PI);
        const double mu = m * cdf + sd * pdf;
        const double second = (m * m + v) * cdf + m * sd * pdf;
        a.mu[k] = std::max(mu, 1e-6);
        a.var[k] = std::max(second - mu * mu, 1e-6);
        a.jcb[k] = cdf;
        continue;
      }
      a.mu[k] = f;
      a.var[k] = j * j * v;
      a.jcb[k] = j;
    }
    return a;
  }

  size_t n_;
  std::vector<double> p_;
  std::vector<double> d_;
  size_t b_;
  std::map<const LayerDesc*, Cache> cache_;
};

LayerDesc Lin(uint32_t in, uint32_t out) { return {v1::Layer::LINEAR, in, out}; }
LayerDesc Act(LayerKind kind) { return {kind}; }
LayerDesc Res(std::vector<LayerDesc> main, std::vector<LayerDesc> shortcut = {}) {
  LayerDesc l{v1::Layer::RESIDUAL};
  l.main = std::move(main);
  l.shortcut = std::move(shortcut);
  return l;
}

// |a - b| relative to the largest magnitude of the reference vector.
void ExpectClose(std::span<const float> got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-30;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_NEAR(got[k] / scale, want[k] / scale, 2e-5) << what << " [" << k << "]";
  }
}

class ResidualReference : public ::testing::TestWithParam<size_t> {};

TEST_P(ResidualReference, ModelMatchesThePlainReference) {
  const size_t batch = GetParam();
  const std::vector<std::vector<LayerDesc>> nets = {
      // Identity block between Linear layers.
      {Lin(3, 5), Act(v1::Layer::TANH), Res({Lin(5, 4), Act(v1::Layer::TANH), Lin(4, 5)}),
       Lin(5, 2)},
      // A block first on the data with a projection shortcut.
      {Res({Lin(3, 3), Act(v1::Layer::SIGMOID)}, {Lin(3, 3)}), Act(v1::Layer::MIXTURE_RELU),
       Lin(3, 2)},
      // Nested blocks; a projection ending in an activation.
      {Lin(3, 4), Act(v1::Layer::TANH),
       Res({Res({Lin(4, 4), Act(v1::Layer::TANH)}), Lin(4, 4)}, {Lin(4, 4), Act(v1::Layer::TANH)}),
       Lin(4, 1)},
      // A one-layer block (the reference library's B8) and a block ending the network.
      {Lin(3, 4), Act(v1::Layer::TANH), Res({Lin(4, 4)}), Lin(4, 2), Res({Lin(2, 2)})},
  };
  for (size_t net = 0; net < nets.size(); ++net) {
    SCOPED_TRACE(::testing::Message() << "network " << net << " batch " << batch);
    Architecture arch;
    arch.input = {3, 1, 1};
    arch.layers = nets[net];
    arch.head = {HeadKind::kRegression, 0};
    auto model = Model::Create(arch, batch);
    ASSERT_TRUE(model.ok()) << model.status();
    Model& m = **model;
    m.Initialize(100 + net, {InitMethod::kHe, 1.0f, 0.5f});
    Rng rng(7 + net);
    std::vector<float> x(batch * 3), y(batch * m.output_width());
    for (float& v : x) v = static_cast<float>(2 * rng.Uniform() - 1);
    for (float& v : y) v = static_cast<float>(rng.Normal());
    const float sigma_v = 0.7f;

    Reference ref(m.parameters(), batch);
    T input{std::vector<double>(x.begin(), x.end()), std::vector<double>(x.size(), 0.0),
            std::vector<double>(x.size(), 1.0)};
    size_t offset = 0;
    const T out = ref.Forward(arch.layers, input, offset);
    ASSERT_EQ(offset, m.num_parameters());
    D delta{std::vector<double>(out.mu.size()), std::vector<double>(out.mu.size())};
    const double v_v = double{sigma_v} * sigma_v;
    for (size_t k = 0; k < out.mu.size(); ++k) {
      const double k_gain = out.jcb[k] / (out.var[k] + v_v);  // docs/maths.md section 4
      delta.mu[k] = k_gain * (y[k] - out.mu[k]);
      delta.var[k] = -k_gain * out.jcb[k];
    }
    ref.Backward(arch.layers, delta, true);

    m.TrainStepLocal(x.data(), nullptr, y.data(), batch, sigma_v);
    const size_t n = batch * m.output_width();
    ExpectClose({m.output().mu, n}, out.mu, "output means");
    ExpectClose({m.output().var, n}, out.var, "output variances");
    const std::span<const float> d = m.deltas();
    const size_t np = m.num_parameters();
    ExpectClose(d.subspan(0, np), {ref.deltas().begin(), ref.deltas().begin() + np},
                "delta means");
    ExpectClose(d.subspan(np), {ref.deltas().begin() + np, ref.deltas().end()}, "delta variances");
    // Not vacuous: every layer moved (B8: a one-layer block's Linear too).
    double smallest = 1e30;
    for (size_t k = 0; k < np; ++k) smallest = std::min(smallest, std::abs(ref.deltas()[k]));
    size_t moved = 0;
    for (size_t k = 0; k < np; ++k) moved += ref.deltas()[k] != 0.0;
    EXPECT_GT(moved, np * 9 / 10);

    m.ApplyStep(CapFactor(batch));
    ref.Step(CapFactor(batch));
    ExpectClose(m.parameters(), ref.params(), "stepped parameters");
  }
}

INSTANTIATE_TEST_SUITE_P(Batches, ResidualReference, ::testing::Values(1, 3, 8));

}  // namespace
}  // namespace tagi::engine
