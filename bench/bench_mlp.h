// The benchmarks' network and its flop count (engine_bench, gpu_bench).
#ifndef TAGI_BENCH_BENCH_MLP_H_
#define TAGI_BENCH_BENCH_MLP_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "worker/engine/architecture.h"

namespace tagi::bench {

// 784-hidden-ReLU-hidden-ReLU-11 with a 10-class hierarchical softmax.
inline engine::Architecture Mlp(uint32_t hidden) {
  using engine::LayerKind;
  engine::Architecture a;
  a.layers = {{v1::Layer::LINEAR, 784, hidden, 0},
              {v1::Layer::RELU, 0, 0, 0},
              {v1::Layer::LINEAR, hidden, hidden, 0},
              {v1::Layer::RELU, 0, 0, 0},
              {v1::Layer::LINEAR, hidden, 11, 0}};
  a.input = {784, 1, 1};
  a.head = {engine::HeadKind::kClassification, 10};
  return a;
}

// Seven products of 2*in*out*batch flops per Linear layer and step.
inline double FlopsPerStep(const engine::Architecture& a, size_t batch) {
  double flops = 0;
  for (const auto& l : a.layers) {
    if (l.kind == v1::Layer::LINEAR) flops += 7.0 * 2.0 * l.in * l.out * batch;
  }
  return flops;
}

// "784-H-H-11".
inline std::string MlpName(int hidden) {
  const std::string h = std::to_string(hidden);
  return "784-" + h + "-" + h + "-11";
}

// The benches' flags: --seconds S, --json, --hidden H, --batch B, and
// --device N where `with_device`. `args` holds the defaults on entry.
struct BenchArgs {
  double seconds = 3.0;
  bool json = false;
  int hidden = 0;
  int batch = 128;
  int device = 0;
};

// False, after `usage` or the range error on stderr, for an unknown flag or
// a size outside 1..65536 (--hidden: min_hidden..65536).
inline bool ParseBenchArgs(int argc, char** argv, const char* program, const char* usage,
                           bool with_device, int min_hidden, BenchArgs& args) {
  for (int i = 1; i < argc; ++i) {
    const bool value = i + 1 < argc;
    if (std::strcmp(argv[i], "--json") == 0) {
      args.json = true;
    } else if (std::strcmp(argv[i], "--seconds") == 0 && value) {
      args.seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--hidden") == 0 && value) {
      args.hidden = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--batch") == 0 && value) {
      args.batch = std::atoi(argv[++i]);
    } else if (with_device && std::strcmp(argv[i], "--device") == 0 && value) {
      args.device = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s %s\n", program, usage);
      return false;
    }
  }
  if (args.hidden < min_hidden || args.hidden > 65536 || args.batch < 1 || args.batch > 65536) {
    std::fprintf(stderr, "%s: --hidden must be in 1..65536, --batch in 1..65536\n", program);
    return false;
  }
  return true;
}

}  // namespace tagi::bench

#endif  // TAGI_BENCH_BENCH_MLP_H_
