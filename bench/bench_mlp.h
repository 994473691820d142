// The benchmarks' network and its flop count (engine_bench, gpu_bench).
#ifndef TAGI_BENCH_BENCH_MLP_H_
#define TAGI_BENCH_BENCH_MLP_H_

#include <cstddef>
#include <cstdint>

#include "worker/engine/architecture.h"

namespace tagi::bench {

// 784-hidden-ReLU-hidden-ReLU-11 with a 10-class hierarchical softmax.
inline engine::Architecture Mlp(uint32_t hidden) {
  using engine::LayerKind;
  engine::Architecture a;
  a.layers = {{LayerKind::kLinear, 784, hidden, 0},
              {LayerKind::kRelu, 0, 0, 0},
              {LayerKind::kLinear, hidden, hidden, 0},
              {LayerKind::kRelu, 0, 0, 0},
              {LayerKind::kLinear, hidden, 11, 0}};
  a.head = {engine::HeadKind::kClassification, 10};
  return a;
}

// Seven products of 2*in*out*batch flops per Linear layer and step.
inline double FlopsPerStep(const engine::Architecture& a, size_t batch) {
  double flops = 0;
  for (const auto& l : a.layers) {
    if (l.kind == engine::LayerKind::kLinear) flops += 7.0 * 2.0 * l.in * l.out * batch;
  }
  return flops;
}

}  // namespace tagi::bench

#endif  // TAGI_BENCH_BENCH_MLP_H_
