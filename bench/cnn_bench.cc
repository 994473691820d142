// cnn_bench: training throughput of the CPU engine on image networks.
//
// For each network (a job file's architecture) and batch, at 1 and 2 BLAS
// threads: samples/s of full training steps (forward, output update,
// backward, capped step) on N(0, 1) inputs and uniform labels (the work per
// step does not depend on the data), the convolutions' achieved GFLOP/s
// (the products a step runs: three forward, two backward-weights and two
// backward-data per convolution, one and two fewer for one that reads the
// data), and, for comparison, the GFLOP/s of the same products run alone
// as bare SGEMMs on the same shapes (what the library reaches there).
//
//   cnn_bench [--seconds S] [--json] [--threads 1,2] [--split] [--check N] [JOB.json:BATCH ...]
// Default: examples/fmnist_cnn.json at B = 128, examples/cifar10_resnet18.json
// at B = 16 and 64 (paths relative to the working directory), at 1 and 2
// threads. --split adds the step's time by kind of work: each layer kind's
// forward and backward, the residual merges, the output layer's innovations
// and the capped step (Model::StepProfile; the timed steps only). --check N
// times nothing: it prints the parameters' fingerprint after N steps, to
// show that a change to the engine kept its bits (compare on one machine).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/rng.h"
#include "spec/kinds.h"
#include "spec/network.h"
#include "spec/plan.h"
#include "worker/engine/blas.h"
#include "worker/engine/model.h"
#include "worker/engine/thread_team.h"

namespace tagi::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// One convolution's products in a step: (m, n, k) of each SGEMM call per
// chunk, and how many chunks.
struct ConvShape {
  size_t out = 0, rows = 0, columns = 0, chunks = 0;
  int products = 0;
};

std::vector<ConvShape> ConvShapes(const spec::Plan& plan, size_t batch) {
  std::vector<ConvShape> shapes;
  for (const spec::Step& step : plan.steps) {
    if (step.op != spec::Step::Op::kLayer) continue;
    const spec::PlannedLayer& l = plan.layers[static_cast<size_t>(step.layer)];
    if (l.spec.kind != v1::Layer::CONV2D) continue;
    const size_t p = size_t{l.out.h} * l.out.w;
    const size_t chunk = std::min(batch, static_cast<size_t>(spec::ConvChunk(p)));
    const bool reads_data = plan.boundaries[static_cast<size_t>(step.in)].is_input;
    shapes.push_back({l.spec.out, size_t{l.spec.in} * l.spec.kernel * l.spec.kernel, chunk * p,
                      (batch + chunk - 1) / chunk, reads_data ? 4 : 7});
  }
  return shapes;
}

double ConvFlops(const std::vector<ConvShape>& shapes) {
  double flops = 0;
  for (const ConvShape& s : shapes) {
    flops += 2.0 * s.out * s.rows * s.columns * s.chunks * s.products;
  }
  return flops;
}

struct Result {
  std::string name;
  int threads = 0;
  size_t batch = 0;
  double samples_per_second = 0;
  double conv_gflops = 0;     // achieved inside the training step
  double conv_seconds = 0;    // share of the step spent in bare SGEMMs of the same shapes
  double sgemm_gflops = 0;    // the same products as bare SGEMMs
  // --split: (kind of work, share of the step's time), largest first.
  std::vector<std::pair<std::string, double>> split;
  // --check N: the parameters' fingerprint after N steps (no timing).
  uint64_t fingerprint = 0;
};

// The profile's seconds summed by kind of work ("CONV2D forward", ...), as
// shares of `total`, largest first.
std::vector<std::pair<std::string, double>> SplitByKind(const spec::Plan& plan,
                                                        const engine::Model::StepProfile& p,
                                                        double apply_seconds, double total) {
  std::vector<std::pair<std::string, double>> kinds;
  auto add = [&](const std::string& name, double seconds) {
    for (auto& [k, v] : kinds) {
      if (k == name) {
        v += seconds;
        return;
      }
    }
    kinds.emplace_back(name, seconds);
  };
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const spec::Step& step = plan.steps[s];
    const std::string kind =
        step.op == spec::Step::Op::kLayer
            ? spec::KindName(plan.layers[static_cast<size_t>(step.layer)].spec.kind)
            : std::string("residual add");
    add(kind + " forward", p.forward[s]);
    add(kind + " backward", p.backward[s]);
  }
  add("output innovations", p.head);
  add("capped step", apply_seconds);
  for (auto& [k, v] : kinds) v /= total;
  std::sort(kinds.begin(), kinds.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  return kinds;
}

// Bare SGEMMs of the convolutions' shapes (forward orientation), timed,
// on a team of `threads` as a model runs them (blas.h Gemm).
double SgemmSecondsPerStep(const std::vector<ConvShape>& shapes, int threads, double* flops) {
  std::unique_ptr<engine::ThreadTeam> team;
  if (threads > 1) team = std::make_unique<engine::ThreadTeam>(threads);
  std::vector<std::vector<float>> a, b, c;
  for (const ConvShape& s : shapes) {
    a.emplace_back(s.out * s.rows, 0.5f);
    b.emplace_back(s.rows * s.columns, 0.25f);
    c.emplace_back(s.out * s.columns, 0.0f);
  }
  auto once = [&] {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const ConvShape& s = shapes[i];
      for (size_t ch = 0; ch < s.chunks * static_cast<size_t>(s.products); ++ch) {
        engine::Gemm(engine::Trans::kNo, engine::Trans::kNo, s.out, s.columns, s.rows,
                     a[i].data(), s.rows, b[i].data(), s.columns, 0.0f, c[i].data(), s.columns,
                     team.get());
      }
    }
  };
  once();
  const auto start = Clock::now();
  int calls = 0;
  while (Seconds(start) < 1.0 || calls < 3) {
    once();
    ++calls;
  }
  *flops = ConvFlops(shapes);
  return Seconds(start) / calls;
}

Result Time(const std::string& name, const spec::Architecture& arch, size_t batch, int threads,
            double seconds, bool split, size_t check_steps) {
  engine::SetBlasThreads(threads);
  Result r;
  r.name = name;
  r.threads = threads;
  r.batch = batch;
  auto model = engine::Model::Create(arch, batch).value();
  model->Initialize(1, {});
  constexpr size_t kPool = 8;
  const size_t width = arch.input_width();
  Rng rng(7);
  std::vector<float> x(kPool * batch * width);
  for (float& v : x) v = static_cast<float>(rng.Normal());
  std::vector<int32_t> labels(kPool * batch);
  for (int32_t& l : labels) l = static_cast<int32_t>(rng.Below(arch.head.num_classes));
  const float cap = engine::CapFactor(batch);
  engine::Model::StepProfile profile;
  double apply_seconds = 0;
  auto step = [&](size_t i) {
    const size_t k = i % kPool;
    model->TrainStepLocal(x.data() + k * batch * width, labels.data() + k * batch, nullptr,
                          batch, 0.2f);
    const auto applying = Clock::now();
    model->ApplyStep(cap);
    apply_seconds += Seconds(applying);
  };
  if (check_steps > 0) {
    for (size_t i = 0; i < check_steps; ++i) step(i);
    r.fingerprint = model->ParameterFingerprint();
    return r;
  }
  step(0);  // warm-up
  apply_seconds = 0;
  if (split) model->SetProfile(&profile);
  size_t steps = 0;
  const auto start = Clock::now();
  while (Seconds(start) < seconds || steps < 2) step(steps++);
  const double elapsed = Seconds(start);
  const std::vector<ConvShape> shapes = ConvShapes(model->plan(), batch);
  r.samples_per_second = static_cast<double>(steps * batch) / elapsed;
  r.conv_gflops = ConvFlops(shapes) * steps / elapsed / 1e9;
  double flops = 0;
  const double sgemm = SgemmSecondsPerStep(shapes, threads, &flops);
  r.sgemm_gflops = flops / sgemm / 1e9;
  r.conv_seconds = sgemm / (elapsed / steps);
  if (split) r.split = SplitByKind(model->plan(), profile, apply_seconds, elapsed);
  return r;
}

int Main(int argc, char** argv) {
  double seconds = 5;
  bool json = false;
  bool split = false;
  size_t check_steps = 0;
  std::vector<int> thread_counts = {1, 2};
  std::vector<std::pair<std::string, size_t>> runs;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--check") == 0 && i + 1 < argc) {
      char* end = nullptr;
      const char* text = argv[++i];
      check_steps = std::strtoul(text, &end, 10);
      if (end == text || *end != '\0' || check_steps == 0 || check_steps > 100000) {
        std::fprintf(stderr, "--check: a number of steps 1..100000, not \"%s\"\n", text);
        return 2;
      }
    } else if (std::strcmp(argv[i], "--split") == 0) {
      split = true;
    } else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      thread_counts.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const long t = std::strtol(p, &end, 10);
        if (end == p || t < 1 || t > 256) {
          std::fprintf(stderr, "--threads: a comma-separated list of counts 1..256\n");
          return 2;
        }
        thread_counts.push_back(static_cast<int>(t));
        p = *end == ',' ? end + 1 : end;
      }
    } else if (const char* colon = std::strrchr(argv[i], ':'); colon != nullptr) {
      runs.emplace_back(std::string(argv[i], static_cast<size_t>(colon - argv[i])), std::strtoul(colon + 1, nullptr, 10));
    } else {
      std::fprintf(stderr,
                   "usage: cnn_bench [--seconds S] [--json] [--threads 1,2] [--split] [--check N] "
                   "[JOB.json:BATCH ...]\n");
      return 2;
    }
  }
  if (runs.empty()) {
    runs = {{"examples/fmnist_cnn.json", 128},
            {"examples/cifar10_resnet18.json", 16},
            {"examples/cifar10_resnet18.json", 64}};
  }
  for (const auto& [path, batch] : runs) {
    auto job = LoadJobSpecFile(path);
    if (!job.ok()) {
      std::fprintf(stderr, "%s\n", job.status().ToString().c_str());
      return 1;
    }
    auto arch = JobArchitecture(*job);
    if (!arch.ok()) {
      std::fprintf(stderr, "%s\n", arch.status().ToString().c_str());
      return 1;
    }
    for (int t : thread_counts) {
      const Result r = Time(job->name(), *arch, batch, t, seconds, split, check_steps);
      if (check_steps > 0) {
        std::printf("%-18s threads %d  B %3zu  after %zu steps: parameters %016llx\n",
                    r.name.c_str(), t, r.batch, check_steps,
                    static_cast<unsigned long long>(r.fingerprint));
      } else if (json) {
        std::string kinds;
        for (const auto& [k, share] : r.split) {
          kinds += (kinds.empty() ? "" : ",") + ("\"" + k + "\":") + std::to_string(share);
        }
        std::printf("{\"bench\":\"%s\",\"threads\":%d,\"batch\":%zu,\"samples_per_second\":%.1f,"
                    "\"conv_gflops\":%.2f,\"sgemm_gflops\":%.2f,\"sgemm_share_of_step\":%.3f,"
                    "\"split\":{%s}}\n",
                    r.name.c_str(), t, r.batch, r.samples_per_second, r.conv_gflops,
                    r.sgemm_gflops, r.conv_seconds, kinds.c_str());
      } else {
        std::printf("%-18s threads %d  B %3zu  %8.1f samples/s  conv %6.1f GFLOP/s = %5.1f%% of "
                    "bare SGEMM on the same shapes (%6.1f GFLOP/s, %4.1f%% of the step)\n",
                    r.name.c_str(), t, r.batch, r.samples_per_second, r.conv_gflops,
                    100.0 * r.conv_gflops / r.sgemm_gflops, r.sgemm_gflops,
                    100.0 * r.conv_seconds);
        for (const auto& [k, share] : r.split) {
          std::printf("    %-28s %5.1f%%\n", k.c_str(), 100.0 * share);
        }
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tagi::bench

int main(int argc, char** argv) {
  tagi::engine::ReexecWithShortBlasSpin(argv);  // as tagi-train and tagi-worker run
  return tagi::bench::Main(argc, argv);
}
