// Checks of the reference image layers (cnn_reference.h) against facts that
// do not come from the reference itself: numbers worked out by hand from
// docs/maths.md, a Linear layer written here from its sections 3
// and 6, and symmetries (transposing an image, regrouping a batch) the
// formulas must respect. No finite differences: TAGI is not gradient based.
#include "tests/engine/cnn_reference.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tagi::ref {
namespace {

constexpr double kTol = 1e-12;

std::vector<double> Uniform(size_t n, double lo, double hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

Gaussians RandomGaussians(size_t n, unsigned seed) {
  return {Uniform(n, -2.0, 2.0, seed), Uniform(n, 0.01, 1.0, seed + 1000)};
}

void ExpectVectorsNear(const std::vector<double>& got, const std::vector<double>& want,
                       double tol = kTol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_NEAR(got[k], want[k], tol * (1.0 + std::abs(want[k]))) << "at " << k;
  }
}

void ExpectGaussiansNear(const Gaussians& got, const Gaussians& want, double tol = kTol) {
  ExpectVectorsNear(got.mu, want.mu, tol);
  ExpectVectorsNear(got.var, want.var, tol);
}

ConvParams RandomConv(int c_in, int c_out, int k, bool bias, unsigned seed) {
  const size_t nw = static_cast<size_t>(c_out) * c_in * k * k;
  ConvParams p;
  p.mu_w = Uniform(nw, -1.0, 1.0, seed);
  p.var_w = Uniform(nw, 0.01, 0.2, seed + 1);
  if (bias) {
    p.mu_b = Uniform(c_out, -1.0, 1.0, seed + 2);
    p.var_b = Uniform(c_out, 0.01, 0.2, seed + 3);
  }
  p.bias = bias;
  p.c_out = c_out;
  return p;
}

// A Linear layer on [n][in] inputs with [out][in] weights, written from
// docs/maths.md sections 3 and 6 independently of the convolution loops.
struct LinearRef {
  int in, out;
  const std::vector<double>&mw, &vw, &mb, &vb;
  bool bias;

  Gaussians Forward(const Gaussians& a, int n) const {
    Gaussians z = Zeros(static_cast<size_t>(n) * out);
    for (int s = 0; s < n; ++s) {
      for (int o = 0; o < out; ++o) {
        double mu = bias ? mb[o] : 0.0, var = bias ? vb[o] : 0.0;
        for (int i = 0; i < in; ++i) {
          const double w = mw[o * in + i], v = vw[o * in + i];
          const double m = a.mu[s * in + i], va = a.var[s * in + i];
          mu += w * m;
          var += (w * w + v) * va + v * m * m;
        }
        z.mu[s * out + o] = mu;
        z.var[s * out + o] = var;
      }
    }
    return z;
  }
  Gaussians BackwardInput(const std::vector<double>& jcb, const Gaussians& dz, int n) const {
    Gaussians d = Zeros(static_cast<size_t>(n) * in);
    for (int s = 0; s < n; ++s) {
      for (int i = 0; i < in; ++i) {
        double sm = 0.0, sv = 0.0;
        for (int o = 0; o < out; ++o) {
          sm += mw[o * in + i] * dz.mu[s * out + o];
          sv += mw[o * in + i] * mw[o * in + i] * dz.var[s * out + o];
        }
        d.mu[s * in + i] = jcb[s * in + i] * sm;
        d.var[s * in + i] = jcb[s * in + i] * jcb[s * in + i] * sv;
      }
    }
    return d;
  }
  ParamDeltas BackwardParams(const Gaussians& a, const Gaussians& dz, int n) const {
    ParamDeltas d;
    d.mu_w.assign(static_cast<size_t>(out) * in, 0.0);
    d.var_w.assign(static_cast<size_t>(out) * in, 0.0);
    for (int o = 0; o < out; ++o) {
      for (int i = 0; i < in; ++i) {
        for (int s = 0; s < n; ++s) {
          const double m = a.mu[s * in + i];
          d.mu_w[o * in + i] += vw[o * in + i] * m * dz.mu[s * out + o];
          d.var_w[o * in + i] += vw[o * in + i] * vw[o * in + i] * m * m * dz.var[s * out + o];
        }
      }
    }
    if (!bias) return d;
    d.mu_b.assign(out, 0.0);
    d.var_b.assign(out, 0.0);
    for (int o = 0; o < out; ++o) {
      for (int s = 0; s < n; ++s) {
        d.mu_b[o] += vb[o] * dz.mu[s * out + o];
        d.var_b[o] += vb[o] * vb[o] * dz.var[s * out + o];
      }
    }
    return d;
  }
};

// [batch][C][H][W] -> [batch*H*W][C] (every pixel a sample), and back.
Gaussians PixelsAsSamples(const Gaussians& a, const Geometry& g, int batch) {
  Gaussians p = Zeros(a.mu.size());
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < g.channels; ++c) {
      for (int y = 0; y < g.height; ++y) {
        for (int x = 0; x < g.width; ++x) {
          const size_t s = (static_cast<size_t>(b) * g.height + y) * g.width + x;
          p.mu[s * g.channels + c] = a.mu[At(g, b, c, y, x)];
          p.var[s * g.channels + c] = a.var[At(g, b, c, y, x)];
        }
      }
    }
  }
  return p;
}
std::vector<double> PixelsAsSamples(const std::vector<double>& v, const Geometry& g, int batch) {
  return PixelsAsSamples(Gaussians{v, v}, g, batch).mu;
}

// Swaps the two image axes of a [batch][C][H][W] tensor.
std::vector<double> Transposed(const std::vector<double>& v, const Geometry& g, int batch) {
  const Geometry t{g.channels, g.width, g.height};
  std::vector<double> out(v.size());
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < g.channels; ++c) {
      for (int y = 0; y < g.height; ++y) {
        for (int x = 0; x < g.width; ++x) out[At(t, b, c, x, y)] = v[At(g, b, c, y, x)];
      }
    }
  }
  return out;
}
Gaussians Transposed(const Gaussians& a, const Geometry& g, int batch) {
  return {Transposed(a.mu, g, batch), Transposed(a.var, g, batch)};
}

// ---------------------------------------------------------------------------
// Geometry (docs/maths.md section 9).

TEST(CnnReferenceGeometry, OutputSizesOfBothPaddingTypes) {
  // ResNet18's stride-2 convolution (type 2) and projection shortcut.
  EXPECT_EQ(OutSize(32, {3, 2, 1, PadType::kBottomRight}), 16);
  EXPECT_EQ(OutSize(32, {2, 2, 0, PadType::kSymmetric}), 16);
  EXPECT_EQ(OutSize(32, {3, 1, 1, PadType::kSymmetric}), 32);
  // The same window with symmetric padding does not divide: (32 - 3 + 2) / 2.
  EXPECT_EQ(OutSize(32, {3, 2, 1, PadType::kSymmetric}), -1);
  EXPECT_EQ(OutSize(31, {3, 2, 1, PadType::kBottomRight}), -1);
  // The MNIST CNN: 28 -> 27 -> 13 -> 9 -> 4.
  EXPECT_EQ(OutSize(28, {4, 1, 1, PadType::kSymmetric}), 27);
  EXPECT_EQ(OutSize(27, {3, 2, 0, PadType::kSymmetric}), 13);
  EXPECT_EQ(OutSize(13, {5, 1, 0, PadType::kSymmetric}), 9);
  EXPECT_EQ(OutSize(9, {3, 2, 0, PadType::kSymmetric}), 4);
  // ImageNet stem k6 s2 p2, and a global pool.
  EXPECT_EQ(OutSize(224, {6, 2, 2, PadType::kSymmetric}), 112);
  EXPECT_EQ(OutSize(4, {4, 1, 0, PadType::kSymmetric}), 1);
  // Stride past the kernel.
  EXPECT_EQ(OutSize(5, {1, 2, 0, PadType::kSymmetric}), 3);
  EXPECT_EQ(OutSize(5, {2, 3, 0, PadType::kSymmetric}), 2);
  // A kernel larger than the image, and invalid windows.
  EXPECT_EQ(OutSize(3, {4, 1, 0, PadType::kSymmetric}), -1);
  EXPECT_EQ(OutSize(8, {2, 0, 0, PadType::kSymmetric}), -1);
}

TEST(CnnReferenceGeometryDeathTest, ConvOnANonDividingGeometryAborts) {
  const Geometry in{1, 32, 32};
  const ConvParams p = RandomConv(1, 1, 3, false, 1);
  const Gaussians a = RandomGaussians(in.size(), 2);
  EXPECT_DEATH(ConvForward(p, in, {3, 2, 1, PadType::kSymmetric}, a, 1), "does not divide");
}

// ---------------------------------------------------------------------------
// Conv2d (section 3).

TEST(CnnReferenceConv, OneByOneConvolutionIsAPerPixelLinear) {
  const int batch = 2, c_in = 3, c_out = 4;
  const Geometry in{c_in, 3, 4};  // not square
  const Window w{1, 1, 0, PadType::kSymmetric};
  const ConvParams p = RandomConv(c_in, c_out, 1, true, 10);
  const Gaussians a = RandomGaussians(batch * in.size(), 11);
  const std::vector<double> jcb = Uniform(batch * in.size(), 0.0, 1.5, 12);
  const Geometry out{c_out, 3, 4};
  const Gaussians dz = {Uniform(batch * out.size(), -1.0, 1.0, 13),
                        Uniform(batch * out.size(), -1.0, 0.0, 14)};

  const int n = batch * in.height * in.width;
  const LinearRef lin{c_in, c_out, p.mu_w, p.var_w, p.mu_b, p.var_b, true};
  const Gaussians pa = PixelsAsSamples(a, in, batch);
  ExpectGaussiansNear(PixelsAsSamples(ConvForward(p, in, w, a, batch), out, batch),
                      lin.Forward(pa, n));
  ExpectGaussiansNear(
      PixelsAsSamples(ConvBackwardInput(p, in, w, jcb, dz, batch), in, batch),
      lin.BackwardInput(PixelsAsSamples(jcb, in, batch), PixelsAsSamples(dz, out, batch), n));
  const ParamDeltas got = ConvBackwardParams(p, in, w, a, dz, batch);
  const ParamDeltas want = lin.BackwardParams(pa, PixelsAsSamples(dz, out, batch), n);
  ExpectVectorsNear(got.mu_w, want.mu_w);
  ExpectVectorsNear(got.var_w, want.var_w);
  ExpectVectorsNear(got.mu_b, want.mu_b);
  ExpectVectorsNear(got.var_b, want.var_b);
}

TEST(CnnReferenceConv, KernelAsLargeAsTheImageIsALinearOverTheFlattenedInput) {
  const int batch = 3, c_in = 2, c_out = 3, k = 3;
  const Geometry in{c_in, k, k};
  const Window w{k, 1, 0, PadType::kSymmetric};
  const ConvParams p = RandomConv(c_in, c_out, k, true, 20);
  const Gaussians a = RandomGaussians(batch * in.size(), 21);
  const std::vector<double> jcb = Uniform(batch * in.size(), 0.0, 1.5, 22);
  const Gaussians dz = {Uniform(batch * c_out, -1.0, 1.0, 23),
                        Uniform(batch * c_out, -1.0, 0.0, 24)};

  // [b][c][r][t] is already [b][c*k*k + r*k + t], and [o][c][i][j] is [o][in].
  const int flat = static_cast<int>(in.size());
  const LinearRef lin{flat, c_out, p.mu_w, p.var_w, p.mu_b, p.var_b, true};
  ExpectGaussiansNear(ConvForward(p, in, w, a, batch), lin.Forward(a, batch));
  ExpectGaussiansNear(ConvBackwardInput(p, in, w, jcb, dz, batch),
                      lin.BackwardInput(jcb, dz, batch));
  const ParamDeltas got = ConvBackwardParams(p, in, w, a, dz, batch);
  const ParamDeltas want = lin.BackwardParams(a, dz, batch);
  ExpectVectorsNear(got.mu_w, want.mu_w);
  ExpectVectorsNear(got.var_w, want.var_w);
  ExpectVectorsNear(got.mu_b, want.mu_b);
  ExpectVectorsNear(got.var_b, want.var_b);
}

// 2x2 input, k2, no padding: one output, worked out by hand.
TEST(CnnReferenceConv, TwoByTwoKernelTwoByTwoImageByHand) {
  const Geometry in{1, 2, 2};
  const Window w{2, 1, 0, PadType::kSymmetric};
  const ConvParams p{{0.5, -1.0, 2.0, 0.25}, {0.01, 0.02, 0.03, 0.04}, {0.5}, {0.05}, true, 1};
  const Gaussians a{{1.0, 2.0, 3.0, 4.0}, {0.1, 0.2, 0.3, 0.4}};

  const Gaussians z = ConvForward(p, in, w, a, 1);
  ASSERT_EQ(z.mu.size(), 1u);
  EXPECT_NEAR(z.mu[0], 0.5 - 2.0 + 6.0 + 1.0 + 0.5, kTol);
  // (0.25+0.01)*0.1 + 0.01*1 = 0.036, (1+0.02)*0.2 + 0.02*4 = 0.284,
  // (4+0.03)*0.3 + 0.03*9 = 1.479, (0.0625+0.04)*0.4 + 0.04*16 = 0.681, + 0.05.
  EXPECT_NEAR(z.var[0], 2.53, kTol);

  const Gaussians dz{{0.3}, {-0.2}};
  const Gaussians da = ConvBackwardInput(p, in, w, {1.0, 0.5, 0.0, 2.0}, dz, 1);
  ExpectVectorsNear(da.mu, {0.15, -0.15, 0.0, 0.15});
  ExpectVectorsNear(da.var, {-0.05, -0.05, 0.0, -0.05});

  const ParamDeltas d = ConvBackwardParams(p, in, w, a, dz, 1);
  ExpectVectorsNear(d.mu_w, {0.003, 0.012, 0.027, 0.048});
  ExpectVectorsNear(d.var_w, {-2e-5, -3.2e-4, -1.62e-3, -5.12e-3});
  ExpectVectorsNear(d.mu_b, {0.015});
  ExpectVectorsNear(d.var_b, {-5e-4});
}

// 2x2 input, k2, s1, p1 symmetric: a 3x3 output whose border windows hang
// into the padding.
TEST(CnnReferenceConv, SymmetricPaddingSkipsThePaddedCellsByHand) {
  const Geometry in{1, 2, 2};
  const Window w{2, 1, 1, PadType::kSymmetric};
  const ConvParams p{{1.0, 2.0, 3.0, 4.0}, {0.1, 0.1, 0.1, 0.1}, {}, {}, false, 1};
  const Gaussians a{{1.0, 2.0, 3.0, 4.0}, {0.0, 0.0, 0.0, 0.0}};

  const Gaussians z = ConvForward(p, in, w, a, 1);
  // Output (y, x) reads (y + i - 1, x + j - 1).
  // E.g. (0,1) = w10*a00 + w11*a01 = 3 + 8; (1,2) = w00*a01 + w10*a11 = 2 + 12.
  ExpectVectorsNear(z.mu, {4, 11, 6, 14, 30, 14, 6, 11, 4});
  ExpectVectorsNear(z.var, {0.1, 0.5, 0.4, 1.0, 3.0, 2.0, 0.9, 2.5, 1.6});

  Gaussians dz{{1, 2, 3, 4, 5, 6, 7, 8, 9}, std::vector<double>(9, -1.0)};
  const Gaussians da = ConvBackwardInput(p, in, w, {1.0, 1.0, 1.0, 1.0}, dz, 1);
  // delta_a[r,t] = sum_ij w[i,j] * dz[r+1-i, t+1-j].
  ExpectVectorsNear(da.mu, {23, 33, 53, 63});
  ExpectVectorsNear(da.var, {-30, -30, -30, -30});

  const ParamDeltas d = ConvBackwardParams(p, in, w, a, dz, 1);
  // w[i,j]: 0.1 * sum over the outputs whose (y+i-1, x+j-1) is inside.
  ExpectVectorsNear(d.mu_w, {7.7, 6.7, 4.7, 3.7});
  EXPECT_TRUE(d.mu_b.empty());
}

// 3x3 input, k2, s2, p1 bottom/right: windows start at row 0; the last row
// and column of windows hang past the bottom/right edge.
TEST(CnnReferenceConv, BottomRightPaddingStartsAtTheTopLeftByHand) {
  const Geometry in{1, 3, 3};
  const Window w{2, 2, 1, PadType::kBottomRight};
  const ConvParams p{{1, 1, 1, 1}, {0, 0, 0, 0}, {}, {}, false, 1};
  const Gaussians a{{1, 2, 3, 4, 5, 6, 7, 8, 9}, std::vector<double>(9, 1.0)};
  const Gaussians z = ConvForward(p, in, w, a, 1);
  ExpectVectorsNear(z.mu, {1 + 2 + 4 + 5, 3 + 6, 7 + 8, 9});
  ExpectVectorsNear(z.var, {4, 2, 2, 1});
  EXPECT_EQ(OutSize(3, {2, 2, 1, PadType::kSymmetric}), -1);
}

// Transposing the image and the kernel transposes every result: catches
// swapped height and width on non-square images (Q3).
TEST(CnnReferenceConv, NonSquareImageCommutesWithTransposition) {
  const int batch = 2, c_in = 2, c_out = 3, k = 3;
  const Geometry in{c_in, 4, 6};
  const Geometry in_t{c_in, 6, 4};
  const Window w{k, 1, 1, PadType::kSymmetric};
  const Geometry out = WindowOutput(in, w, c_out);
  ASSERT_EQ(out.height, 4);
  ASSERT_EQ(out.width, 6);
  const ConvParams p = RandomConv(c_in, c_out, k, true, 30);
  ConvParams pt = p;
  const Geometry kernels{c_out * c_in, k, k};
  pt.mu_w = Transposed(p.mu_w, kernels, 1);
  pt.var_w = Transposed(p.var_w, kernels, 1);
  const Gaussians a = RandomGaussians(batch * in.size(), 31);
  const std::vector<double> jcb = Uniform(batch * in.size(), 0.0, 1.5, 32);
  const Gaussians dz = {Uniform(batch * out.size(), -1.0, 1.0, 33),
                        Uniform(batch * out.size(), -1.0, 0.0, 34)};

  ExpectGaussiansNear(Transposed(ConvForward(p, in, w, a, batch), out, batch),
                      ConvForward(pt, in_t, w, Transposed(a, in, batch), batch));
  ExpectGaussiansNear(Transposed(ConvBackwardInput(p, in, w, jcb, dz, batch), in, batch),
                      ConvBackwardInput(pt, in_t, w, Transposed(jcb, in, batch),
                                        Transposed(dz, out, batch), batch));
  const ParamDeltas d = ConvBackwardParams(p, in, w, a, dz, batch);
  const ParamDeltas dt =
      ConvBackwardParams(pt, in_t, w, Transposed(a, in, batch), Transposed(dz, out, batch), batch);
  ExpectVectorsNear(Transposed(d.mu_w, kernels, 1), dt.mu_w);
  ExpectVectorsNear(Transposed(d.var_w, kernels, 1), dt.var_w);
  ExpectVectorsNear(d.mu_b, dt.mu_b);
  ExpectVectorsNear(d.var_b, dt.var_b);
}

// k1 s2 on 5x5 (B6): the 3x3 output reads the even rows and columns only;
// every other pixel gets zero innovations.
TEST(CnnReferenceConv, StrideLargerThanTheKernelLeavesUnreadPixelsAtZero) {
  const int batch = 2, c_in = 2, c_out = 3;
  const Geometry in{c_in, 5, 5};
  const Window w{1, 2, 0, PadType::kSymmetric};
  const Geometry out = WindowOutput(in, w, c_out);
  ASSERT_EQ(out.height, 3);
  ASSERT_EQ(out.width, 3);
  const ConvParams p = RandomConv(c_in, c_out, 1, true, 40);
  const Gaussians a = RandomGaussians(batch * in.size(), 41);
  const std::vector<double> jcb(batch * in.size(), 1.0);
  const Gaussians dz = {Uniform(batch * out.size(), -1.0, 1.0, 42),
                        Uniform(batch * out.size(), -1.0, 0.0, 43)};
  const LinearRef lin{c_in, c_out, p.mu_w, p.var_w, p.mu_b, p.var_b, true};

  const Gaussians z = ConvForward(p, in, w, a, batch);
  const Gaussians da = ConvBackwardInput(p, in, w, jcb, dz, batch);
  for (int b = 0; b < batch; ++b) {
    for (int r = 0; r < 5; ++r) {
      for (int t = 0; t < 5; ++t) {
        if (r % 2 != 0 || t % 2 != 0) {
          for (int c = 0; c < c_in; ++c) {
            EXPECT_EQ(da.mu[At(in, b, c, r, t)], 0.0);
            EXPECT_EQ(da.var[At(in, b, c, r, t)], 0.0);
          }
          continue;
        }
        // The pixel as a one-sample Linear input, its output position's
        // deltas as the Linear's output deltas.
        Gaussians px = Zeros(c_in);
        for (int c = 0; c < c_in; ++c) {
          px.mu[c] = a.mu[At(in, b, c, r, t)];
          px.var[c] = a.var[At(in, b, c, r, t)];
        }
        Gaussians dzp = Zeros(c_out);
        for (int o = 0; o < c_out; ++o) {
          dzp.mu[o] = dz.mu[At(out, b, o, r / 2, t / 2)];
          dzp.var[o] = dz.var[At(out, b, o, r / 2, t / 2)];
        }
        const Gaussians zp = lin.Forward(px, 1);
        const Gaussians dap = lin.BackwardInput(std::vector<double>(c_in, 1.0), dzp, 1);
        for (int o = 0; o < c_out; ++o) {
          EXPECT_NEAR(z.mu[At(out, b, o, r / 2, t / 2)], zp.mu[o], kTol);
          EXPECT_NEAR(z.var[At(out, b, o, r / 2, t / 2)], zp.var[o], kTol);
        }
        for (int c = 0; c < c_in; ++c) {
          EXPECT_NEAR(da.mu[At(in, b, c, r, t)], dap.mu[c], kTol);
          EXPECT_NEAR(da.var[At(in, b, c, r, t)], dap.var[c], kTol);
        }
      }
    }
  }
  // The parameter deltas see only the read pixels: zeroing the unread ones
  // changes nothing.
  Gaussians a_read = a;
  for (int b = 0; b < batch; ++b) {
    for (int c = 0; c < c_in; ++c) {
      for (int r = 0; r < 5; ++r) {
        for (int t = 0; t < 5; ++t) {
          if (r % 2 != 0 || t % 2 != 0) a_read.mu[At(in, b, c, r, t)] = 0.0;
        }
      }
    }
  }
  const ParamDeltas d = ConvBackwardParams(p, in, w, a, dz, batch);
  const ParamDeltas d_read = ConvBackwardParams(p, in, w, a_read, dz, batch);
  ExpectVectorsNear(d.mu_w, d_read.mu_w);
  ExpectVectorsNear(d.var_w, d_read.var_w);
}

// k2 s3 on 5x5: row and column 2 lie between the windows.
TEST(CnnReferenceConv, StrideThreeKernelTwoSkipsTheMiddleRow) {
  const Geometry in{1, 5, 5};
  const Window w{2, 3, 0, PadType::kSymmetric};
  const ConvParams p{{1, 2, 3, 4}, {0, 0, 0, 0}, {}, {}, false, 1};
  const Gaussians dz{{1, 1, 1, 1}, {-1, -1, -1, -1}};
  const Gaussians da = ConvBackwardInput(p, in, w, std::vector<double>(25, 1.0), dz, 1);
  for (int r = 0; r < 5; ++r) {
    for (int t = 0; t < 5; ++t) {
      const double want = (r == 2 || t == 2) ? 0.0 : p.mu_w[(r % 3) * 2 + (t % 3)];
      EXPECT_EQ(da.mu[r * 5 + t], want) << r << "," << t;
      EXPECT_EQ(da.var[r * 5 + t], -want * want) << r << "," << t;
    }
  }
}

// ---------------------------------------------------------------------------
// AvgPool2d (section 4).

TEST(CnnReferenceAvgPool, ConstantImageAveragesToItself) {
  const Geometry in{2, 4, 4};
  const Gaussians a{std::vector<double>(2 * in.size(), 2.5),
                    std::vector<double>(2 * in.size(), 0.3)};
  for (const Window w : {Window{2, 2, 0, PadType::kSymmetric}, Window{3, 1, 0, PadType::kSymmetric},
                         Window{4, 1, 0, PadType::kSymmetric}}) {
    const Gaussians z = AvgPoolForward(in, w, a, 2);
    const double kk = w.kernel * w.kernel;
    for (size_t k = 0; k < z.mu.size(); ++k) {
      EXPECT_NEAR(z.mu[k], 2.5, kTol);
      EXPECT_NEAR(z.var[k], 0.3 / kk, kTol);  // K cells of 0.3 over K^2
    }
  }
}

// k2 s2 p1 on 4x4 (B5): corner windows hold one real cell, edges two, the
// centre four; the divisor stays 4 and two identical images agree.
TEST(CnnReferenceAvgPool, PaddedCellsCountInTheDivisorButAddNothing) {
  const Geometry in{1, 4, 4};
  const Window w{2, 2, 1, PadType::kSymmetric};
  const Gaussians a{std::vector<double>(2 * in.size(), 2.0),
                    std::vector<double>(2 * in.size(), 0.8)};
  const Gaussians z = AvgPoolForward(in, w, a, 2);
  const std::vector<double> cells = {1, 2, 1, 2, 4, 2, 1, 2, 1};
  ASSERT_EQ(z.mu.size(), 18u);
  for (int b = 0; b < 2; ++b) {
    for (int k = 0; k < 9; ++k) {
      EXPECT_NEAR(z.mu[b * 9 + k], 2.0 * cells[k] / 4, kTol);
      EXPECT_NEAR(z.var[b * 9 + k], 0.8 * cells[k] / 16, kTol);
    }
  }
}

// k3 s2 on 5x5: 2x2 overlapping windows; a pixel's delta sums the windows
// that contain it.
TEST(CnnReferenceAvgPool, OverlappingWindowsSumTheirDeltas) {
  const Geometry in{1, 5, 5};
  const Window w{3, 2, 0, PadType::kSymmetric};
  std::vector<double> jcb(25, 1.0);
  jcb[12] = 0.5;  // the centre pixel, in all four windows
  const Gaussians dz{{1, 1, 1, 1}, {-1, -1, -1, -1}};
  const Gaussians da = AvgPoolBackwardInput(in, w, jcb, dz, 1);
  const std::vector<int> windows = {1, 1, 2, 1, 1,  //
                                    1, 1, 2, 1, 1,  //
                                    2, 2, 4, 2, 2,  //
                                    1, 1, 2, 1, 1,  //
                                    1, 1, 2, 1, 1};
  for (int k = 0; k < 25; ++k) {
    EXPECT_NEAR(da.mu[k], jcb[k] * windows[k] / 9.0, kTol) << k;
    EXPECT_NEAR(da.var[k], -jcb[k] * jcb[k] * windows[k] / 81.0, kTol) << k;
  }
}

TEST(CnnReferenceAvgPool, StrideLargerThanTheKernelLeavesUnreadPixelsAtZero) {
  const Geometry in{1, 5, 5};
  const Window w{1, 2, 0, PadType::kSymmetric};
  const Gaussians dz{std::vector<double>(9, 1.0), std::vector<double>(9, -1.0)};
  const Gaussians da = AvgPoolBackwardInput(in, w, std::vector<double>(25, 1.0), dz, 1);
  for (int r = 0; r < 5; ++r) {
    for (int t = 0; t < 5; ++t) {
      const bool read = r % 2 == 0 && t % 2 == 0;
      EXPECT_EQ(da.mu[r * 5 + t], read ? 1.0 : 0.0);
      EXPECT_EQ(da.var[r * 5 + t], read ? -1.0 : 0.0);
    }
  }
}

// ---------------------------------------------------------------------------
// MaxPool2d (section 5).

TEST(CnnReferenceMaxPool, TiesGoToTheFirstCellInScanOrder) {
  const Geometry in{1, 2, 2};
  const Window w{2, 2, 0, PadType::kSymmetric};
  const Gaussians a{{3, 5, 5, 1}, {0.1, 0.2, 0.3, 0.4}};
  const MaxPoolResult res = MaxPoolForward(in, w, a, 1);
  ASSERT_EQ(res.index.size(), 1u);
  EXPECT_EQ(res.index[0], 1);
  EXPECT_EQ(res.z.mu[0], 5.0);
  EXPECT_EQ(res.z.var[0], 0.2);  // the selected cell's variance, not the largest

  const Gaussians da =
      MaxPoolBackwardInput(in, w, res.index, {1.0, 0.5, 1.0, 1.0}, {{2.0}, {-4.0}}, 1);
  ExpectVectorsNear(da.mu, {0, 1.0, 0, 0});
  ExpectVectorsNear(da.var, {0, -1.0, 0, 0});
}

TEST(CnnReferenceMaxPool, SelectionIgnoresTheVariances) {
  const Geometry in{1, 2, 2};
  const Gaussians a{{1, 2, 0, 0}, {0.1, 0.01, 100, 100}};
  const MaxPoolResult res = MaxPoolForward(in, {2, 2, 0, PadType::kSymmetric}, a, 1);
  EXPECT_EQ(res.index[0], 1);
}

// 2x3 image, k2 s1: both windows pick cell (0,1), whose delta accumulates.
TEST(CnnReferenceMaxPool, OverlappingWindowsThatPickTheSameCellAccumulate) {
  const Geometry in{1, 2, 3};
  const Window w{2, 1, 0, PadType::kSymmetric};
  const Gaussians a{{1, 9, 2, 0, 3, 4}, std::vector<double>(6, 0.5)};
  const MaxPoolResult res = MaxPoolForward(in, w, a, 1);
  ASSERT_EQ(res.index.size(), 2u);
  EXPECT_EQ(res.index[0], 1);
  EXPECT_EQ(res.index[1], 1);
  const Gaussians da = MaxPoolBackwardInput(in, w, res.index, std::vector<double>(6, 2.0),
                                            {{0.25, 0.5}, {-0.1, -0.3}}, 1);
  ExpectVectorsNear(da.mu, {0, 2.0 * 0.75, 0, 0, 0, 0});
  ExpectVectorsNear(da.var, {0, 4.0 * -0.4, 0, 0, 0, 0});
}

// k2 s2 p1 on 2x2: every window holds one real cell and three padding
// cells; negative means still win (padding is skipped, not read as 0).
TEST(CnnReferenceMaxPool, PaddingIsSkippedNotReadAsZero) {
  const Geometry in{1, 2, 2};
  const Window w{2, 2, 1, PadType::kSymmetric};
  const Gaussians a{{-1, -2, -3, -4}, {0.1, 0.2, 0.3, 0.4}};
  const MaxPoolResult res = MaxPoolForward(in, w, a, 1);
  ExpectVectorsNear(res.z.mu, a.mu);
  ExpectVectorsNear(res.z.var, a.var);
  EXPECT_EQ(res.index, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(CnnReferenceMaxPool, IndicesAddressTheWholeBatch) {
  const Geometry in{2, 2, 2};
  const Gaussians a{{0, 1, 0, 0, /**/ 0, 0, 1, 0, /**/ 1, 0, 0, 0, /**/ 0, 0, 0, 1},
                    std::vector<double>(16, 1.0)};
  const MaxPoolResult res = MaxPoolForward(in, {2, 2, 0, PadType::kSymmetric}, a, 2);
  EXPECT_EQ(res.index, (std::vector<int64_t>{1, 6, 8, 15}));
}

TEST(CnnReferenceMaxPool, StrideLargerThanTheKernelLeavesUnreadPixelsAtZero) {
  const Geometry in{1, 5, 5};
  const Window w{1, 2, 0, PadType::kSymmetric};
  const Gaussians a = RandomGaussians(25, 50);
  const MaxPoolResult res = MaxPoolForward(in, w, a, 1);
  const Gaussians da =
      MaxPoolBackwardInput(in, w, res.index, std::vector<double>(25, 1.0),
                           {std::vector<double>(9, 1.0), std::vector<double>(9, -1.0)}, 1);
  for (int r = 0; r < 5; ++r) {
    for (int t = 0; t < 5; ++t) {
      const bool read = r % 2 == 0 && t % 2 == 0;
      EXPECT_EQ(da.mu[r * 5 + t], read ? 1.0 : 0.0);
    }
  }
}

// ---------------------------------------------------------------------------
// BatchNorm (section 6).

// 1-D path, F = 2 features, B = 3: feature 0 has mean 3, squares 4+1+9 = 14,
// sum of var_a 2, so var_s = 16 / (3 - 1) = 8 (not 16/3, not 7); feature 1
// mean 1, squares 6, no var_a: var_s = 3.
TEST(CnnReferenceBatchNorm, TrainForwardOnAFlatInputByHand) {
  const Geometry in{2, 1, 1};
  const Gaussians a{{1, 0, 2, 0, 6, 3}, {0.5, 0, 0.5, 0, 1, 0}};
  const NormParams p{{2.0, 1.0}, {0.5, 0.0}, {0.1, 0.0}, {0.2, 0.0}, true};
  RunningStats running = InitialRunningStats(2);
  const NormForward f = BatchNormTrainForward(p, in, a, 3, 0.0, 0.9, &running);
  ExpectVectorsNear(f.stats.mu, {3.0, 1.0});
  ExpectVectorsNear(f.stats.var, {8.0, 3.0});
  // Sample 2, feature 0: a~ = 3, r = 1/sqrt(8):
  // mu_z = 3*2/sqrt(8) + 0.1, var_z = (1*(4 + 0.5) + 0.5*9)/8 + 0.2.
  EXPECT_NEAR(f.z.mu[4], 6.0 / std::sqrt(8.0) + 0.1, kTol);
  EXPECT_NEAR(f.z.var[4], 1.325, kTol);
  // Sample 0, feature 1: a~ = -1, r = 1/sqrt(3), gamma exact 1, beta 0.
  EXPECT_NEAR(f.z.mu[1], -1.0 / std::sqrt(3.0), kTol);
  EXPECT_NEAR(f.z.var[1], 0.0, kTol);
}

// 2-D path, C = 2, 1x2 maps, B = 2: n = 4 per channel. Channel 0 holds
// 1, 3, 5, 7 (mean 4, squares 20) with var_a 1 each: var_s = 24/3 = 8;
// channel 1 holds 0, 0, 0, 4 (mean 1, squares 12): var_s = 4.
TEST(CnnReferenceBatchNorm, TrainStatisticsOfMapsPoolBatchAndPositions) {
  const Geometry in{2, 1, 2};
  const Gaussians a{{1, 3, 0, 0, 5, 7, 0, 4}, {1, 1, 0, 0, 1, 1, 0, 0}};
  const NormStats s = BatchNormStatistics(in, a, 2);
  ExpectVectorsNear(s.mu, {4.0, 1.0});
  ExpectVectorsNear(s.var, {8.0, 4.0});
}

// A map BatchNorm is a flat BatchNorm over every pixel as a sample.
TEST(CnnReferenceBatchNorm, MapPathEqualsFlatPathOverPixelsAsSamples) {
  const int batch = 2;
  const Geometry in{3, 2, 3};
  const Geometry flat{3, 1, 1};
  const int n = batch * in.height * in.width;
  const Gaussians a = RandomGaussians(batch * in.size(), 60);
  const std::vector<double> jcb = Uniform(batch * in.size(), 0.0, 1.5, 61);
  const Gaussians dz = {Uniform(batch * in.size(), -1.0, 1.0, 62),
                        Uniform(batch * in.size(), -1.0, 0.0, 63)};
  const NormParams p{Uniform(3, 0.5, 1.5, 64), Uniform(3, 0.01, 0.3, 65), Uniform(3, -0.5, 0.5, 66),
                     Uniform(3, 0.01, 0.3, 67), true};
  const double eps = 1e-5;

  RunningStats run_map = InitialRunningStats(3), run_flat = InitialRunningStats(3);
  const Gaussians pa = PixelsAsSamples(a, in, batch);
  const NormForward fm = BatchNormTrainForward(p, in, a, batch, eps, 0.9, &run_map);
  const NormForward ff = BatchNormTrainForward(p, flat, pa, n, eps, 0.9, &run_flat);
  ExpectVectorsNear(fm.stats.mu, ff.stats.mu);
  ExpectVectorsNear(fm.stats.var, ff.stats.var);
  ExpectGaussiansNear(PixelsAsSamples(fm.z, in, batch), ff.z);
  ExpectGaussiansNear(
      PixelsAsSamples(BatchNormBackwardInput(p, in, fm.stats, eps, jcb, dz, batch), in, batch),
      BatchNormBackwardInput(p, flat, ff.stats, eps, PixelsAsSamples(jcb, in, batch),
                             PixelsAsSamples(dz, in, batch), n));
  const ParamDeltas dm = BatchNormBackwardParams(p, in, fm.stats, eps, a, dz, batch);
  const ParamDeltas df =
      BatchNormBackwardParams(p, flat, ff.stats, eps, pa, PixelsAsSamples(dz, in, batch), n);
  ExpectVectorsNear(dm.mu_w, df.mu_w);
  ExpectVectorsNear(dm.var_w, df.var_w);
  ExpectVectorsNear(dm.mu_b, df.mu_b);
  ExpectVectorsNear(dm.var_b, df.var_b);
}

TEST(CnnReferenceBatchNorm, FirstBatchReplacesRunningStatsLaterOnesMixWithMomentum) {
  const Geometry in{1, 1, 1};
  const NormParams p{{1.0}, {0.1}, {0.0}, {0.1}, true};
  RunningStats running = InitialRunningStats(1);
  EXPECT_EQ(running.mu, std::vector<double>{0.0});
  EXPECT_EQ(running.var, std::vector<double>{1.0});
  // Batch 1: mean 3, var_s = (4+1+9 + 2)/2 = 8.
  BatchNormTrainForward(p, in, {{1, 2, 6}, {0.5, 0.5, 1}}, 3, 1e-5, 0.9, &running);
  EXPECT_FALSE(running.first_batch);
  ExpectVectorsNear(running.mu, {3.0});
  ExpectVectorsNear(running.var, {8.0});
  // Batch 2: mean 1, var_s = (1+1+4)/2 = 3.
  BatchNormTrainForward(p, in, {{0, 0, 3}, {0, 0, 0}}, 3, 1e-5, 0.9, &running);
  ExpectVectorsNear(running.mu, {0.9 * 3.0 + 0.1 * 1.0});
  ExpectVectorsNear(running.var, {0.9 * 8.0 + 0.1 * 3.0});
}

TEST(CnnReferenceBatchNorm, EvalForwardNormalisesWithTheRunningStats) {
  const Geometry in{1, 1, 1};
  const NormParams p{{1.0}, {0.0}, {}, {}, false};
  RunningStats running{{1.0}, {3.0}, true};
  const Gaussians z = BatchNormEvalForward(p, in, {{4.0, 1.0}, {3.0, 0.0}}, 2, 0.0, running);
  // a~ = 3, r = 1/sqrt(3): mu = sqrt(3), var = 3/3.
  ExpectVectorsNear(z.mu, {std::sqrt(3.0), 0.0});
  ExpectVectorsNear(z.var, {1.0, 0.0});
}

// The flat case of TrainForwardOnAFlatInputByHand, feature 0: r = 1/sqrt(8),
// a~ = (-2, -1, 3), gamma (2, 0.5), beta (0.1, 0.2).
TEST(CnnReferenceBatchNorm, BackwardByHand) {
  const Geometry in{1, 1, 1};
  const NormParams p{{2.0}, {0.5}, {0.1}, {0.2}, true};
  const NormStats s{{3.0}, {8.0}};
  const Gaussians a{{1, 2, 6}, {0.5, 0.5, 1}};
  const Gaussians dz{{1, 0, 2}, {-1, -1, -1}};
  const Gaussians da = BatchNormBackwardInput(p, in, s, 0.0, {0.5, 1.0, 0.0}, dz, 3);
  const double r = 1.0 / std::sqrt(8.0);
  ExpectVectorsNear(da.mu, {2 * r * 0.5, 0, 0});
  ExpectVectorsNear(da.var, {-(2 * r * 0.5) * (2 * r * 0.5), -(2 * r) * (2 * r), 0});
  const ParamDeltas d = BatchNormBackwardParams(p, in, s, 0.0, a, dz, 3);
  ExpectVectorsNear(d.mu_w, {r * 0.5 * (-2 * 1 + -1 * 0 + 3 * 2)});
  ExpectVectorsNear(d.var_w, {-0.25 / 8.0 * (4 + 1 + 9)});
  ExpectVectorsNear(d.mu_b, {0.2 * 3});
  ExpectVectorsNear(d.var_b, {-0.04 * 3});
}

TEST(CnnReferenceBatchNorm, WithoutBiasThereIsNoBetaTermOrDelta) {
  const Geometry in{1, 1, 1};
  const NormParams with{{2.0}, {0.5}, {0.7}, {0.3}, true};
  NormParams without = with;
  without.bias = false;
  without.mu_b.clear();
  without.var_b.clear();
  const Gaussians a{{1, 2, 6}, {0.5, 0.5, 1}};
  RunningStats r1 = InitialRunningStats(1), r2 = InitialRunningStats(1);
  const NormForward fw = BatchNormTrainForward(with, in, a, 3, 1e-5, 0.9, &r1);
  const NormForward fo = BatchNormTrainForward(without, in, a, 3, 1e-5, 0.9, &r2);
  for (int b = 0; b < 3; ++b) {
    EXPECT_NEAR(fo.z.mu[b], fw.z.mu[b] - 0.7, kTol);
    EXPECT_NEAR(fo.z.var[b], fw.z.var[b] - 0.3, kTol);
  }
  const ParamDeltas d =
      BatchNormBackwardParams(without, in, fo.stats, 1e-5, a, {{1, 1, 1}, {-1, -1, -1}}, 3);
  EXPECT_EQ(d.mu_w.size(), 1u);
  EXPECT_TRUE(d.mu_b.empty());
  EXPECT_TRUE(d.var_b.empty());
}

// The identity of docs/maths.md section 12.1: equal deltas over a channel at B = 1
// give delta_mu_gamma = 0 (the a~ sum to zero).
TEST(CnnReferenceBatchNorm, EqualDeltasOverAChannelLeaveGammaMeanUnchanged) {
  const Geometry in{2, 3, 3};
  const Gaussians a = RandomGaussians(in.size(), 70);
  const NormParams p{{1.0, 1.0}, {0.5, 0.5}, {0.0, 0.0}, {0.5, 0.5}, true};
  const NormStats s = BatchNormStatistics(in, a, 1);
  const Gaussians dz{std::vector<double>(in.size(), 0.3), std::vector<double>(in.size(), -0.1)};
  const ParamDeltas d = BatchNormBackwardParams(p, in, s, 1e-5, a, dz, 1);
  EXPECT_NEAR(d.mu_w[0], 0.0, 1e-14);
  EXPECT_NEAR(d.mu_w[1], 0.0, 1e-14);
  EXPECT_LT(d.var_w[0], 0.0);
}

// ---------------------------------------------------------------------------
// LayerNorm (section 7).

// C = 2 channels of 1x2, B = 2. Sample 0: 1, 2, 3, 6 (mean 3, squares 14,
// no var_a): var = 14/3. Sample 1: zeros with var_a 1: var = 4/3.
TEST(CnnReferenceLayerNorm, StatisticsArePerSampleOverAllValues) {
  const Geometry in{2, 1, 2};
  const Gaussians a{{1, 2, 3, 6, 0, 0, 0, 0}, {0, 0, 0, 0, 1, 1, 1, 1}};
  const NormParams p{{1.0, 2.0}, {0.0, 0.1}, {0.0, 0.5}, {0.0, 0.2}, true};
  const NormForward f = LayerNormForward(p, in, a, 2, 0.0);
  ExpectVectorsNear(f.stats.mu, {3.0, 0.0});
  ExpectVectorsNear(f.stats.var, {14.0 / 3.0, 4.0 / 3.0});
  // Sample 0, channel 1, x = 1 (value 6): a~ = 3, r^2 = 3/14, gamma (2, 0.1).
  EXPECT_NEAR(f.z.mu[3], 3.0 * 2.0 / std::sqrt(14.0 / 3.0) + 0.5, kTol);
  EXPECT_NEAR(f.z.var[3], 3.0 / 14.0 * (0.1 * 9.0) + 0.2, kTol);
  // Sample 1, channel 0: a~ = 0, r^2 = 3/4, gamma (1, 0).
  EXPECT_NEAR(f.z.mu[4], 0.0, kTol);
  EXPECT_NEAR(f.z.var[4], 0.75, kTol);
}

// With one gamma and beta for every feature, LayerNorm over [B][F] is
// BatchNorm over the transpose [F][B] (samples and features swap roles).
TEST(CnnReferenceLayerNorm, UniformAffineLayerNormIsBatchNormOfTheTranspose) {
  const int batch = 3, features = 5;
  const Geometry ln{features, 1, 1};
  const Geometry bn{batch, 1, 1};
  const Gaussians a = RandomGaussians(batch * features, 80);
  const std::vector<double> jcb = Uniform(batch * features, 0.0, 1.5, 81);
  const Gaussians dz = {Uniform(batch * features, -1.0, 1.0, 82),
                        Uniform(batch * features, -1.0, 0.0, 83)};
  auto transpose = [&](const std::vector<double>& v) {
    return Transposed(v, Geometry{1, batch, features}, 1);
  };
  auto uniform = [](int n, double v) { return std::vector<double>(n, v); };
  const NormParams pl{uniform(features, 1.3), uniform(features, 0.2), uniform(features, -0.4),
                      uniform(features, 0.1), true};
  const NormParams pb{uniform(batch, 1.3), uniform(batch, 0.2), uniform(batch, -0.4),
                      uniform(batch, 0.1), true};
  const double eps = 1e-4;

  const NormForward fl = LayerNormForward(pl, ln, a, batch, eps);
  RunningStats running = InitialRunningStats(batch);
  const Gaussians at{transpose(a.mu), transpose(a.var)};
  const Gaussians dzt{transpose(dz.mu), transpose(dz.var)};
  const NormForward fb = BatchNormTrainForward(pb, bn, at, features, eps, 0.9, &running);
  ExpectVectorsNear(fl.stats.mu, fb.stats.mu);
  ExpectVectorsNear(fl.stats.var, fb.stats.var);
  ExpectVectorsNear(transpose(fl.z.mu), fb.z.mu);
  ExpectVectorsNear(transpose(fl.z.var), fb.z.var);
  const Gaussians dl = LayerNormBackwardInput(pl, ln, fl.stats, eps, jcb, dz, batch);
  const Gaussians db = BatchNormBackwardInput(pb, bn, fb.stats, eps, transpose(jcb), dzt, features);
  ExpectVectorsNear(transpose(dl.mu), db.mu);
  ExpectVectorsNear(transpose(dl.var), db.var);
  // The deltas group differently (per feature vs per sample) but sum alike.
  const ParamDeltas pdl = LayerNormBackwardParams(pl, ln, fl.stats, eps, a, dz, batch);
  const ParamDeltas pdb = BatchNormBackwardParams(pb, bn, fb.stats, eps, at, dzt, features);
  auto sum = [](const std::vector<double>& v) {
    double s = 0.0;
    for (double x : v) s += x;
    return s;
  };
  EXPECT_NEAR(sum(pdl.mu_w), sum(pdb.mu_w), 1e-12);
  EXPECT_NEAR(sum(pdl.var_w), sum(pdb.var_w), 1e-12);
  EXPECT_NEAR(sum(pdl.mu_b), sum(pdb.mu_b), 1e-12);
  EXPECT_NEAR(sum(pdl.var_b), sum(pdb.var_b), 1e-12);
}

// Per-channel gamma on maps = per-feature gamma on the flattened sample
// with equal values within each channel; deltas sum over the channel.
TEST(CnnReferenceLayerNorm, ChannelParametersOfMapsSumTheirFeatures) {
  const int batch = 2;
  const Geometry maps{2, 2, 2};
  const Geometry flat{8, 1, 1};
  const Gaussians a = RandomGaussians(batch * maps.size(), 90);
  const Gaussians dz = {Uniform(batch * maps.size(), -1.0, 1.0, 91),
                        Uniform(batch * maps.size(), -1.0, 0.0, 92)};
  const NormParams pm{{1.2, 0.8}, {0.1, 0.3}, {0.2, -0.2}, {0.05, 0.15}, true};
  NormParams pf;
  for (int f = 0; f < 8; ++f) {
    pf.mu_w.push_back(pm.mu_w[f / 4]);
    pf.var_w.push_back(pm.var_w[f / 4]);
    pf.mu_b.push_back(pm.mu_b[f / 4]);
    pf.var_b.push_back(pm.var_b[f / 4]);
  }
  const NormForward fm = LayerNormForward(pm, maps, a, batch, 1e-5);
  const NormForward ff = LayerNormForward(pf, flat, a, batch, 1e-5);
  ExpectGaussiansNear(fm.z, ff.z);
  const ParamDeltas dm = LayerNormBackwardParams(pm, maps, fm.stats, 1e-5, a, dz, batch);
  const ParamDeltas df = LayerNormBackwardParams(pf, flat, ff.stats, 1e-5, a, dz, batch);
  for (int c = 0; c < 2; ++c) {
    double mw = 0, vw = 0, mb = 0, vb = 0;
    for (int f = 4 * c; f < 4 * c + 4; ++f) {
      mw += df.mu_w[f];
      vw += df.var_w[f];
      mb += df.mu_b[f];
      vb += df.var_b[f];
    }
    EXPECT_NEAR(dm.mu_w[c], mw, kTol);
    EXPECT_NEAR(dm.var_w[c], vw, kTol);
    EXPECT_NEAR(dm.mu_b[c], mb, kTol);
    EXPECT_NEAR(dm.var_b[c], vb, kTol);
  }
}

// ---------------------------------------------------------------------------
// The capped step (docs/maths.md section 7).

TEST(CnnReferenceStep, CapFactorsByBatchSize) {
  EXPECT_EQ(CapFactor(1), 0.1);
  EXPECT_EQ(CapFactor(2), 2.0);
  EXPECT_EQ(CapFactor(255), 2.0);
  EXPECT_EQ(CapFactor(256), 3.0);
}

TEST(CnnReferenceStep, CapsBothMomentsAndFloorsTheVariance) {
  // var 4, cap factor 2: cap = 1 for both moments.
  std::vector<double> mu{0.0, 0.0, 0.0}, var{4.0, 4.0, 1e-6};
  CappedStep({3.0, -0.5, 0.0}, {-10.0, 0.25, -1.0}, 2.0, &mu, &var);
  ExpectVectorsNear(mu, {1.0, -0.5, 0.0});
  // 1e-6 - min(1, sqrt(1e-6)/2) < 0: floored.
  ExpectVectorsNear(var, {3.0, 4.25, kVarianceFloor});
}

TEST(CnnReferenceStep, ApplyStepSkipsTheBiasOfABiasFreeLayer) {
  NormParams p{{1.0}, {4.0}, {}, {}, false};
  ApplyStep(ParamDeltas{{0.5}, {-0.5}, {}, {}}, 2.0, &p);
  ExpectVectorsNear(p.mu_w, {1.5});
  ExpectVectorsNear(p.var_w, {3.5});
  ConvParams c{{0.0}, {1.0}, {0.0}, {1.0}, true, 1};
  ApplyStep(ParamDeltas{{2.0}, {0.1}, {-2.0}, {-0.1}}, 2.0, &c);
  ExpectVectorsNear(c.mu_w, {0.5});
  ExpectVectorsNear(c.mu_b, {-0.5});
  ExpectVectorsNear(c.var_b, {0.9});
}

}  // namespace
}  // namespace tagi::ref
