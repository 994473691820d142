// Plain double-precision reference of the heads of docs/heads.md (the
// reference library's Remax, ClosedFormSoftmax, EvenExp and heteroscedastic
// update), written from the formulas as the document states them, sharing
// no code with the engine (worker/engine/heads.h): no shift of the softmax
// means, no scratch reuse, the innovations of the pre-activation z computed
// as the reference library does (the jcb folded in). Test-only.
#ifndef TAGI_TESTS_ENGINE_NAIVE_HEADS_H_
#define TAGI_TESTS_ENGINE_NAIVE_HEADS_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace tagi::engine::testing {

struct NaiveMoments {
  std::vector<double> mu, var, jcb;
  // Per unit, the summed magnitudes of the terms of the output's
  // log-variance (var = (exp(v) - 1) mu^2 with v a sum of such terms): the
  // scale of v's rounding in float, for comparisons.
  std::vector<double> log_var_terms;
};

// MixtureReLU of one unit (docs/maths.md section 3) with the 1e-6 floors, and
// Phi(mu / sd).
inline void NaiveMixture(double mz, double vz, double* m, double* v, double* phi) {
  const double sd = std::sqrt(vz);
  const double alpha = mz / sd;
  const double cdf = 0.5 * std::erfc(-alpha / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * alpha * alpha) / std::sqrt(2.0 * M_PI);
  const double mean = mz * cdf + sd * pdf;
  *m = std::max(mean, 1e-6);
  *v = std::max((mz * mz + vz) * cdf + mz * sd * pdf - mean * mean, 1e-6);
  *phi = cdf;
}

inline NaiveMoments NaiveRemax(const std::vector<double>& mz, const std::vector<double>& vz) {
  const size_t k = mz.size();
  std::vector<double> mm(k), vm(k), phi(k);
  double mt = 0, vt = 0;
  for (size_t j = 0; j < k; ++j) {
    NaiveMixture(mz[j], vz[j], &mm[j], &vm[j], &phi[j]);
    mt += mm[j];
    vt += vm[j];
  }
  auto vl = [](double mu, double var) { return std::log(1 + var / (mu * mu)); };
  auto ml = [&vl](double mu, double var) { return std::log(mu) - vl(mu, var) / 2; };
  std::vector<double> cov(k), v(k), a(k);
  double sum = 0;
  for (size_t j = 0; j < k; ++j) {
    cov[j] = std::log(1 + vm[j] / (mt * mm[j]));
    const double m = ml(mm[j], vm[j]) - ml(mt, vt);
    v[j] = vl(mm[j], vm[j]) + vl(mt, vt) - 2 * cov[j];
    a[j] = std::max(1e-6, std::exp(m + v[j] / 2));
    sum += a[j];
  }
  NaiveMoments out;
  for (size_t j = 0; j < k; ++j) {
    const double mu = a[j] / sum;
    const double var = (std::exp(v[j]) - 1) * mu * mu;
    const double cov_am = (std::exp(vl(mm[j], vm[j]) - cov[j]) - 1) * mu * mm[j];
    out.mu.push_back(mu);
    out.var.push_back(var);
    out.jcb.push_back(std::min(std::sqrt(var) * std::sqrt(vz[j]), cov_am / phi[j]) / vz[j]);
    out.log_var_terms.push_back(vl(mm[j], vm[j]) + vl(mt, vt) + 2 * std::abs(cov[j]));
  }
  return out;
}

inline NaiveMoments NaiveClosedFormSoftmax(const std::vector<double>& mz,
                                           const std::vector<double>& vz) {
  const size_t k = mz.size();
  std::vector<double> me(k), ve(k);
  double ms = 0, vs = 0;
  for (size_t j = 0; j < k; ++j) {
    me[j] = std::exp(mz[j] + vz[j] / 2);
    ve[j] = std::exp(2 * mz[j] + vz[j]) * (std::exp(vz[j]) - 1);
    ms += me[j];
    vs += ve[j];
  }
  const double vls = std::log(1 + vs / (ms * ms));
  const double mls = std::log(ms) - vls / 2;
  NaiveMoments out;
  for (size_t j = 0; j < k; ++j) {
    const double c = std::log(1 + ve[j] / (ms * me[j]));
    const double mla = mz[j] - mls;
    const double vla = vz[j] + vls - 2 * c;
    const double mu = std::exp(mla + vla / 2);
    out.mu.push_back(mu);
    out.var.push_back((std::exp(vla) - 1) * mu * mu);
    out.jcb.push_back(mu * (vz[j] - c) / vz[j]);
    out.log_var_terms.push_back(vz[j] + vls + 2 * std::abs(c));
  }
  return out;
}

// EvenExp on flat unit i; `jcb_in` is the jcb its input carries (1 after a
// layer with parameters), which an even unit passes on.
inline void NaiveEvenExp(size_t i, double mz, double vz, double jcb_in, double* m, double* v,
                         double* jcb) {
  if (i % 2 == 0) {
    *m = mz;
    *v = vz;
    *jcb = jcb_in;
    return;
  }
  *m = std::exp(mz + vz / 2);
  *v = std::exp(2 * mz + vz) * (std::exp(vz) - 1);
  *jcb = *m;
}

// The reference's heteroscedastic innovations of the pre-activations of a
// [mean, noise] pair: out[0..3] = dmu_mean, dvar_mean, dmu_noise, dvar_noise.
inline void NaiveHeteroscedastic(double mu, double var, double jcb, double m, double s, double j,
                                 double y, double out[4]) {
  out[0] = out[1] = out[2] = out[3] = 0;
  if (!std::isfinite(y)) return;
  const double var_v2 = 3 * s + 2 * m * m;
  const double total = var + m;
  out[0] = jcb / total * (y - mu);
  out[1] = -jcb * jcb / total;
  const double mu_v = m / total * (y - mu);
  const double var_v = m - m * m / total;
  const double e_post = mu_v * mu_v + var_v;
  const double var_post = 2 * var_v * var_v + 4 * var_v * mu_v * mu_v;
  const double kappa = s / var_v2;
  const double m_post = m + kappa * (e_post - m);
  const double s_post = s + kappa * kappa * (var_post - var_v2);
  double jv = j / s;
  if (!std::isfinite(jv)) jv = 0;
  out[2] = jv * (m_post - m);
  out[3] = jv * jv * (s_post - s);
}

}  // namespace tagi::engine::testing

#endif  // TAGI_TESTS_ENGINE_NAIVE_HEADS_H_
