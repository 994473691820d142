// tagi-run: one job on this host, like torchrun --standalone.
//
//   tagi-run --nproc N JOB.json [--set FIELD=VALUE ...] [--out model.tagi]
//
// Starts a coordinator and N workers on loopback (ctl/local_cluster.h:
// private ports, tokens and directory), submits the job (its worldSize
// becomes N unless it is elastic), shows tagictl's progress bar, writes the
// model, and exits with the job's state. Every process and file it made is
// gone when it exits: on success, on failure, and on Ctrl-C (the first
// cancels the job and waits for it to end, a second stops everything at
// once). When the job fails, the end of every process's log is printed.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/job_overrides.h"
#include "common/job_spec.h"
#include "common/signals.h"
#include "common/status.h"
#include "ctl/format.h"
#include "ctl/jobs_client.h"
#include "ctl/local_cluster.h"
#include "ctl/watch.h"

ABSL_FLAG(int, nproc, 2, "Workers to start (the job's world, unless it is elastic).");
ABSL_FLAG(std::string, out, "", "Write the trained model to this file.");
ABSL_FLAG(int, threads, 0, "BLAS threads per worker (0: this host's cores / nproc, at least 1).");
ABSL_FLAG(std::string, gpus, "",
          "Comma-separated GPU indices: worker i runs on cuda:GPUS[i % count]. Empty: the CPU.");
ABSL_FLAG(std::vector<std::string>, data_root, {},
          "More directories the workers may read data from (besides the standard ones and "
          "the current directory).");
ABSL_FLAG(std::string, bin_dir, "",
          "Where tagi-coordinator and tagi-worker are (default: beside tagi-run).");
ABSL_FLAG(absl::Duration, timeout, absl::Hours(24 * 7), "Give up (and cancel) after this long.");

namespace tagi {
namespace {

constexpr char kUsage[] =
    "runs one job on this host: a coordinator and N workers on loopback.\n"
    "  tagi-run --nproc N JOB.json [--set FIELD=VALUE ...] [--out model.tagi]\n"
    "--set overrides a job file field by its path (epochs=2, data.trainLimit=1000,\n"
    "layers.0.linear.outFeatures=64); repeat it for more.\n"
    "Exit codes: 0 SUCCEEDED, 1 FAILED, 2 usage or a job file that is refused, 3 CANCELLED,\n"
    "4 the cluster could not start or was lost, 130 interrupted (Ctrl-C).\n"
    "Run with --helpfull for every flag.";

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCancelled = 3;
constexpr int kExitCluster = 4;
constexpr int kExitInterrupted = 130;
constexpr size_t kLogTailBytes = 4000;

int Usage(const std::string& why) {
  std::fprintf(stderr, "tagi-run: %s\nusage: %s\n", Printable(why).c_str(), kUsage);
  return kExitUsage;
}

std::string OwnDirectory() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : self.parent_path().string();
}

absl::StatusOr<std::vector<std::string>> Devices(const std::string& gpus) {
  std::vector<std::string> devices;
  if (gpus.empty()) return devices;
  for (absl::string_view g : absl::StrSplit(gpus, ',')) {
    int index = -1;
    if (!absl::SimpleAtoi(g, &index) || index < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--gpus \"%s\": \"%s\" is not a GPU index", gpus, g));
    }
    devices.push_back(absl::StrCat("cuda:", index));
  }
  return devices;
}

// The job file with the overrides, its world set to nproc unless it is
// elastic, and refused here as the coordinator would refuse it.
absl::StatusOr<tagi::v1::JobSpec> Job(const std::string& path,
                                      const std::vector<std::string>& sets, int nproc) {
  TAGI_ASSIGN_OR_RETURN(tagi::v1::JobSpec spec, LoadJobSpecFile(path));
  TAGI_RETURN_IF_ERROR(ApplyOverrides(spec, sets));
  if (!IsElastic(spec)) spec.set_world_size(static_cast<uint32_t>(nproc));
  if (absl::Status st = ValidateJobSpec(spec); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, sets.empty() ? "" : absl::StrCat(" with --set ", absl::StrJoin(sets, " --set ")),
        ": ", st.message()));
  }
  return spec;
}

int ExitCode(tagi::v1::JobState state) {
  switch (state) {
    case tagi::v1::SUCCEEDED:
      return 0;
    case tagi::v1::CANCELLED:
      return kExitCancelled;
    default:
      return kExitFailed;
  }
}

// Runs the job on `cluster`; `interrupted` counts the termination signals
// (the signal thread cancels the job on the first).
int RunJob(LocalCluster& cluster, const tagi::v1::JobSpec& spec, const std::string& out,
           std::atomic<int>& interrupted, std::atomic<bool>& submitted, std::string& job_id,
           JobsClient& client) {
  auto job = client.Submit(spec);
  if (!job.ok()) {
    std::fprintf(stderr, "tagi-run: submit: %s\n", Printable(job.status().message()).c_str());
    return kExitCluster;
  }
  job_id = job->id();
  submitted = true;
  if (interrupted.load() > 0) (void)client.Cancel(job_id);  // a Ctrl-C before the id existed
  std::fprintf(stderr, "tagi-run: job %s submitted; Ctrl-C cancels it\n",
               Printable(job_id).c_str());
  WatchOptions w;
  w.program = "tagi-run";
  w.timeout = absl::GetFlag(FLAGS_timeout);
  w.reconnect_for = absl::ZeroDuration();  // our coordinator does not restart
  auto end = WatchJob(client, job_id, w);
  if (!end.ok()) {
    std::fprintf(stderr, "tagi-run: lost the job: %s\n", Printable(end.status().message()).c_str());
    if (auto dead = cluster.Dead(); dead.has_value()) {
      std::fprintf(stderr, "tagi-run: %s\n", dead->c_str());
    }
    return interrupted.load() > 0 ? kExitInterrupted : kExitCluster;
  }
  if (end->state() == tagi::v1::SUCCEEDED && !out.empty()) {
    auto bytes = client.DownloadModel(job_id, absl::Minutes(10));
    if (!bytes.ok()) {
      std::fprintf(stderr, "tagi-run: download: %s\n",
                   Printable(bytes.status().message()).c_str());
      return kExitCluster;
    }
    if (absl::Status st = WriteFileAtomic(out, *bytes); !st.ok()) {
      std::fprintf(stderr, "tagi-run: %s\n", Printable(st.message()).c_str());
      return kExitFailed;
    }
    std::printf("model: %s (%zu bytes)\n", out.c_str(), bytes->size());
  }
  if (interrupted.load() > 0 && end->state() == tagi::v1::CANCELLED) return kExitInterrupted;
  return ExitCode(end->state());
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  auto sets = TakeRepeatedFlag(argc, argv, "set");
  if (!sets.ok()) return Usage(std::string(sets.status().message()));
  std::vector<char*> raw = ParseFlags(argc, argv);
  if (raw.size() != 2) return Usage("expected one job file");
  const std::string path = raw[1];
  const int nproc = absl::GetFlag(FLAGS_nproc);
  if (nproc < 1 || nproc > 256) return Usage("--nproc must be 1..256");
  auto spec = Job(path, *sets, nproc);
  if (!spec.ok()) {
    std::fprintf(stderr, "tagi-run: %s\n", Printable(spec.status().message()).c_str());
    return kExitUsage;
  }
  auto devices = Devices(absl::GetFlag(FLAGS_gpus));
  if (!devices.ok()) return Usage(std::string(devices.status().message()));

  LocalClusterOptions o;
  o.nproc = nproc;
  o.world = IsElastic(*spec) && spec->max_world_size() > 0 ? spec->max_world_size() : nproc;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.threads = absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads)
                                               : std::max(1, cores / nproc);
  o.bin_dir = absl::GetFlag(FLAGS_bin_dir).empty() ? OwnDirectory() : absl::GetFlag(FLAGS_bin_dir);
  o.devices = *devices;
  o.data_roots = {"/usr/share/datasets", "/var/lib/tagi/data",
                  std::filesystem::current_path().string()};
  for (const std::string& r : absl::GetFlag(FLAGS_data_root)) o.data_roots.push_back(r);

  // Signals first: from here on a Ctrl-C is ours to handle.
  InstallTerminationHandler();
  auto cluster = LocalCluster::Start(o);
  if (!cluster.ok()) {
    std::fprintf(stderr, "tagi-run: cannot start the cluster: %s\n",
                 Printable(cluster.status().message()).c_str());
    return kExitCluster;
  }
  LocalCluster& c = **cluster;
  std::fprintf(stderr, "tagi-run: coordinator on %s, %d worker%s (%s)\n", c.target().c_str(),
               nproc, nproc == 1 ? "" : "s", c.dir().c_str());
  JobsClient client(c.target(), absl::Seconds(10), c.security());
  std::atomic<int> interrupted{0};
  std::atomic<bool> submitted{false};
  std::atomic<bool> done{false};
  std::string job_id;  // written before `submitted` turns true
  std::thread signals([&] {
    while (!done.load()) {
      if (WaitForTerminationSignal(absl::Milliseconds(200)) == 0) continue;
      const int n = ++interrupted;
      if (n == 1) {
        std::fprintf(stderr, "\ntagi-run: interrupted; cancelling the job (again to stop now)\n");
        if (submitted.load()) (void)client.Cancel(job_id);
      } else {
        std::fprintf(stderr, "\ntagi-run: stopping every process now\n");
        c.Kill();
      }
    }
  });
  int rc = RunJob(c, *spec, absl::GetFlag(FLAGS_out), interrupted, submitted, job_id, client);
  if (rc == kExitFailed || rc == kExitCluster) {
    // Our own processes' logs, as they wrote them (several lines each).
    const std::string tails = c.LogTails(kLogTailBytes);
    std::fprintf(stderr, "tagi-run: the end of each process's log:\n");
    std::fwrite(tails.data(), 1, tails.size(), stderr);
  }
  c.Stop();
  done = true;
  signals.join();
  return rc;
}

}  // namespace
}  // namespace tagi

int main(int argc, char** argv) { return tagi::Main(argc, argv); }
