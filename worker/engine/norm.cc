#include "worker/engine/norm.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "worker/engine/elementwise.h"
#include "worker/engine/cpu_layers.h"

namespace tagi::engine {
namespace {

// The TAGI product of gamma with the standardised input, plus beta, over
// `n` values of one channel that share (mean, r = 1/sqrt(var + eps)).
void Normalise(const float* mu_a, const float* var_a, size_t n, float mean, float r, float mu_g,
               float var_g, float mu_b, float var_b, float* mu_z, float* var_z) {
  const float second = mu_g * mu_g + var_g;
  for (size_t i = 0; i < n; ++i) {
    elementwise::Normalise(mu_a[i], var_a[i], mean, r, mu_g, second, var_g, mu_b, var_b, &mu_z[i],
                           &var_z[i]);
  }
}

// Sums in kLanes interleaved partial sums, added up in a fixed order at
// the end: the same bits every run and for any team (each channel is one
// thread's), and the compiler vectorises them where one running total
// would wait on every addition before the next.
constexpr size_t kLanes = 8;
struct LaneSum {
  double lane[kLanes] = {};
  double Total() const {
    double half[kLanes / 2];
    for (size_t l = 0; l < kLanes / 2; ++l) half[l] = lane[l] + lane[l + kLanes / 2];
    return (half[0] + half[2]) + (half[1] + half[3]);
  }
};
// Calls f(i, lane of i) for i in [0, n): whole blocks of kLanes (the loop
// the compiler vectorises), then the rest.
template <typename F>
void EachInLanes(size_t n, F&& f) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) f(i + l, l);
  }
  for (size_t l = 0; i < n; ++i, ++l) f(i, l);
}

// Sums, over `n` values of one channel, of the parameter deltas' terms
// (one running total each: with lanes, as in Statistics, the 32
// accumulators outgrew the registers and the loop ran slower).
struct ParamSums {
  double gamma_mu = 0.0;
  double gamma_var = 0.0;
  double beta_mu = 0.0;
  double beta_var = 0.0;
};
void AddParamSums(const float* mu_a, const float* dmu, const float* dvar, size_t n, float mean,
                  float r, float var_g, ParamSums* sums) {
  for (size_t i = 0; i < n; ++i) {
    const float g = elementwise::GammaFactor(mu_a[i], mean, r, var_g);
    sums->gamma_mu += g * dmu[i];
    sums->gamma_var += g * g * dvar[i];
    sums->beta_mu += dmu[i];
    sums->beta_var += dvar[i];
  }
}

// Backward over `n` values at offset `at` that share (mean, r) and gamma:
// adds their parameter-delta terms to `sums` and, when the input needs
// innovations, writes them (the statistics are constants).
void BackwardRun(const LayerIo& io, size_t at, size_t n, float mean, float r, float mu_g,
                 float var_g, ParamSums* sums) {
  AddParamSums(io.in.mu + at, io.delta_out.mu + at, io.delta_out.var + at, n, mean, r, var_g,
               sums);
  if (io.delta_in.mu == nullptr) return;
  const float k = r * mu_g;
  for (size_t i = 0; i < n; ++i) {
    io.delta_in.mu[at + i] = k * io.delta_out.mu[at + i];
    io.delta_in.var[at + i] = k * k * io.delta_out.var[at + i];
  }
}

void StoreParamDeltas(const LayerIo& io, size_t c, const ParamSums& s, bool bias) {
  io.deltas[0].mu[c] = static_cast<float>(s.gamma_mu);
  io.deltas[0].var[c] = static_cast<float>(s.gamma_var);
  if (!bias) return;
  const float var_b = io.params[1].var[c];
  io.deltas[1].mu[c] = static_cast<float>(var_b * s.beta_mu);
  io.deltas[1].var[c] = static_cast<float>(var_b * var_b * s.beta_var);
}

// (mean, variance) over the given values: the spread of the means plus
// the sum of the variances, over count - 1 (at least 1).
template <typename Each>
std::pair<float, float> Statistics(size_t count, Each&& each) {
  LaneSum sum;
  each([&](const float* __restrict mu, const float*, size_t n) {
    EachInLanes(n, [&](size_t i, size_t l) { sum.lane[l] += mu[i]; });
  });
  const double mean = sum.Total() / static_cast<double>(count);
  LaneSum spread;
  LaneSum var_sum;
  each([&](const float* __restrict mu, const float* __restrict var, size_t n) {
    EachInLanes(n, [&](size_t i, size_t l) {
      const double d = mu[i] - mean;
      spread.lane[l] += d * d;
      var_sum.lane[l] += var[i];
    });
  });
  const double divisor = static_cast<double>(std::max<size_t>(count, 2) - 1);
  return {static_cast<float>(mean),
          static_cast<float>((spread.Total() + var_sum.Total()) / divisor)};
}

}  // namespace

BatchNorm::BatchNorm(const spec::PlannedLayer& planned)
    : channels_(planned.in.c),
      positions_(size_t{planned.in.h} * planned.in.w),
      eps_(planned.spec.eps),
      momentum_(planned.spec.momentum),
      bias_(planned.spec.bias) {}

void BatchNorm::Forward(const LayerIo& io, Mode mode) {
  const size_t sample = channels_ * positions_;
  float* running_mu = io.state;
  float* running_var = io.state + channels_;
  float* first = io.state + 2 * channels_;
  float* batch_mu = io.derived;
  float* batch_var = io.derived + channels_;
  const bool train = mode == Mode::kTrain;
  if (train) {
    if (io.sync == nullptr) {
      BatchStatistics(io, batch_mu, batch_var);
    } else {
      SyncedStatistics(io, batch_mu, batch_var);
    }
    // The first training batch replaces the initial running statistics.
    const float m = *first > 0.0f ? 0.0f : momentum_;
    for (size_t c = 0; c < channels_; ++c) {
      running_mu[c] = elementwise::RunningUpdate(running_mu[c], batch_mu[c], m);
      running_var[c] = elementwise::RunningUpdate(running_var[c], batch_var[c], m);
    }
    *first = 0.0f;
  }
  const float* mean = train ? batch_mu : running_mu;
  const float* var = train ? batch_var : running_var;
  ParallelFor(io.team, channels_, 2, [&](size_t first, size_t last) {
    for (size_t c = first; c < last; ++c) {
      const float r = 1.0f / std::sqrt(var[c] + eps_);
      const float mu_b = bias_ ? io.params[1].mu[c] : 0.0f;
      const float var_b = bias_ ? io.params[1].var[c] : 0.0f;
      for (size_t b = 0; b < io.batch; ++b) {
        const size_t at = b * sample + c * positions_;
        Normalise(io.in.mu + at, io.in.var + at, positions_, mean[c], r, io.params[0].mu[c],
                  io.params[0].var[c], mu_b, var_b, io.out.mu + at, io.out.var + at);
      }
    }
  });
}

void BatchNorm::BatchStatistics(const LayerIo& io, float* mean, float* var) const {
  const size_t sample = channels_ * positions_;
  ParallelFor(io.team, channels_, 2, [&](size_t first, size_t last) {
    for (size_t c = first; c < last; ++c) {
      std::tie(mean[c], var[c]) = Statistics(io.batch * positions_, [&](auto&& f) {
        for (size_t b = 0; b < io.batch; ++b) {
          const size_t at = b * sample + c * positions_;
          f(io.in.mu + at, io.in.var + at, positions_);
        }
      });
    }
  });
}

// The same statistics over every replica's batch, in two sums across the
// replicas: the sums of the means and of the variances, then the spread
// about the global mean. `var` follows `mean` in the derived buffer, and a
// third slice keeps the summed variances.
void BatchNorm::SyncedStatistics(const LayerIo& io, float* mean, float* var) const {
  const size_t sample = channels_ * positions_;
  float* var_sum = io.derived + 2 * channels_;
  auto each = [&](size_t c, auto&& f) {
    for (size_t b = 0; b < io.batch; ++b) {
      const size_t at = b * sample + c * positions_;
      for (size_t i = 0; i < positions_; ++i) f(io.in.mu[at + i], io.in.var[at + i]);
    }
  };
  for (size_t c = 0; c < channels_; ++c) {
    double sum_mu = 0.0, sum_var = 0.0;
    each(c, [&](float m, float v) {
      sum_mu += m;
      sum_var += v;
    });
    mean[c] = static_cast<float>(sum_mu);
    var[c] = static_cast<float>(sum_var);
  }
  io.sync->sum({mean, 2 * channels_});
  const double n = static_cast<double>(io.sync->world * io.batch * positions_);
  for (size_t c = 0; c < channels_; ++c) {
    var_sum[c] = var[c];
    mean[c] = static_cast<float>(mean[c] / n);
    double spread = 0.0;
    each(c, [&](float m, float) {
      const double d = m - mean[c];
      spread += d * d;
    });
    var[c] = static_cast<float>(spread);
  }
  io.sync->sum({var, channels_});
  const double divisor = std::max(n, 2.0) - 1.0;
  for (size_t c = 0; c < channels_; ++c) {
    var[c] = static_cast<float>((static_cast<double>(var[c]) + var_sum[c]) / divisor);
  }
}

void BatchNorm::Backward(const LayerIo& io) {
  const size_t sample = channels_ * positions_;
  ParallelFor(io.team, channels_, 2, [&](size_t first, size_t last) {
    for (size_t c = first; c < last; ++c) {
      const float mean = io.derived[c];
      const float r = 1.0f / std::sqrt(io.derived[channels_ + c] + eps_);
      const float mu_g = io.params[0].mu[c];
      ParamSums sums;
      for (size_t b = 0; b < io.batch; ++b) {
        const size_t at = b * sample + c * positions_;
        BackwardRun(io, at, positions_, mean, r, mu_g, io.params[0].var[c], &sums);
      }
      StoreParamDeltas(io, c, sums, bias_);
    }
  });
}

LayerNorm::LayerNorm(const spec::PlannedLayer& planned)
    : channels_(planned.in.c),
      positions_(size_t{planned.in.h} * planned.in.w),
      eps_(planned.spec.eps),
      bias_(planned.spec.bias) {}

void LayerNorm::Forward(const LayerIo& io, Mode /*mode*/) {
  const size_t sample = channels_ * positions_;
  ParallelFor(io.team, io.batch, 2, [&](size_t first, size_t last) {
    for (size_t b = first; b < last; ++b) {
      const float* mu_a = io.in.mu + b * sample;
      const float* var_a = io.in.var + b * sample;
      const auto [mean, var] = Statistics(sample, [&](auto&& f) { f(mu_a, var_a, sample); });
      io.scratch[2 * b] = mean;
      io.scratch[2 * b + 1] = var;
      const float r = 1.0f / std::sqrt(var + eps_);
      for (size_t c = 0; c < channels_; ++c) {
        const size_t at = c * positions_;
        Normalise(mu_a + at, var_a + at, positions_, mean, r, io.params[0].mu[c],
                  io.params[0].var[c], bias_ ? io.params[1].mu[c] : 0.0f,
                  bias_ ? io.params[1].var[c] : 0.0f, io.out.mu + b * sample + at,
                  io.out.var + b * sample + at);
      }
    }
  });
}

void LayerNorm::Backward(const LayerIo& io) {
  const size_t sample = channels_ * positions_;
  ParallelFor(io.team, channels_, 2, [&](size_t first, size_t last) {
    for (size_t c = first; c < last; ++c) {
      ParamSums sums;
      const float mu_g = io.params[0].mu[c];
      for (size_t b = 0; b < io.batch; ++b) {
        const size_t at = b * sample + c * positions_;
        const float mean = io.scratch[2 * b];
        const float r = 1.0f / std::sqrt(io.scratch[2 * b + 1] + eps_);
        BackwardRun(io, at, positions_, mean, r, mu_g, io.params[0].var[c], &sums);
      }
      StoreParamDeltas(io, c, sums, bias_);
    }
  });
}

using Made = absl::StatusOr<std::unique_ptr<Layer>>;

void RegisterNormLayers(CpuLayerRegistry& r) {
  r.Add(tagi::v1::Layer::BATCH_NORM,
        [](const spec::PlannedLayer& p) -> Made { return std::make_unique<BatchNorm>(p); });
  r.Add(tagi::v1::Layer::LAYER_NORM,
        [](const spec::PlannedLayer& p) -> Made { return std::make_unique<LayerNorm>(p); });
}

}  // namespace tagi::engine
