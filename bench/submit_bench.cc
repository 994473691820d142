// submit_bench: latency of Coordinator::Submit with N ended jobs retained.
//
// Builds a Coordinator on a fresh state dir, submits and cancels --retained
// jobs (so they stay as ended records, and on disk), then times --samples
// submissions (each cancelled right after, so the queue stays short) and
// prints p50 / p90 / max in milliseconds. Usage:
//   submit_bench [--retained 4000] [--samples 200] [--state-dir DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/job_spec.h"
#include "coordinator/coordinator.h"

namespace {

int Arg(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (name == argv[i]) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

std::string StrArg(int argc, char** argv, const std::string& name) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (name == argv[i]) return argv[i + 1];
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  const int retained = Arg(argc, argv, "--retained", 4000);
  const int samples = Arg(argc, argv, "--samples", 200);
  std::string dir = StrArg(argc, argv, "--state-dir");
  bool remove_dir = false;
  if (dir.empty()) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tagi-submit-bench-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = pattern;
    remove_dir = true;
  }
  auto spec = tagi::LoadJobSpecFile(TAGI_SOURCE_DIR "/examples/fmnist_fnn.json");
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return 1;
  }
  spec->set_world_size(1);
  tagi::RealClock clock;
  tagi::coordinator::CoordinatorOptions options;
  options.state_dir = dir;
  options.retention.max_ended_jobs = static_cast<size_t>(retained) + static_cast<size_t>(samples) + 10;
  options.retention.max_ended_age = absl::InfiniteDuration();
  std::vector<double> ms;
  {
    tagi::coordinator::Coordinator coord(options, clock);
    for (int i = 0; i < retained; ++i) {
      auto job = coord.Submit(*spec);
      if (!job.ok() || !coord.Cancel(job->id()).ok()) {
        std::fprintf(stderr, "setup failed at job %d\n", i);
        return 1;
      }
    }
    coord.FlushState();
    for (int i = 0; i < samples; ++i) {
      const auto start = std::chrono::steady_clock::now();
      auto job = coord.Submit(*spec);
      const auto end = std::chrono::steady_clock::now();
      if (!job.ok()) return 1;
      ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
      (void)coord.Cancel(job->id());
      coord.FlushState();
    }
  }
  std::sort(ms.begin(), ms.end());
  std::printf("retained %d ended jobs: submit p50 %.3f ms  p90 %.3f ms  max %.3f ms (%d samples)\n",
              retained, ms[ms.size() / 2], ms[ms.size() * 9 / 10], ms.back(), samples);
  if (remove_dir) std::filesystem::remove_all(dir);
  return 0;
}
