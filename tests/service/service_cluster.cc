#include "tests/service/service_cluster.h"

#include <google/protobuf/util/json_util.h>

#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/substitute.h"

namespace tagi::testing {
namespace {

constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

std::string Tail(const std::string& text, size_t n) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

}  // namespace

std::string BinPath(const std::string& name) { return std::string(TAGI_BIN_DIR) + "/" + name; }

// The worker the tests start: tagi-worker, or the build given by
// TAGI_WORKER_BINARY (the CUDA-emulation build of tests/cuda).
std::string WorkerBinary() {
#ifdef TAGI_WORKER_BINARY
  return TAGI_WORKER_BINARY;
#else
  return BinPath("tagi-worker");
#endif
}

bool HaveFashionMnist() {
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/" + f)) return false;
  }
  return true;
}

std::string FmnistJobJson(const FmnistJob& job) {
  return absl::Substitute(R"({
  "name": "$0",
  "layers": [
    {"kind": "LINEAR", "inFeatures": 784, "outFeatures": $1},
    {"kind": "RELU"},
    {"kind": "LINEAR", "inFeatures": $1, "outFeatures": 11}
  ],
  "head": {"classification": {"numClasses": 10}},
  "data": {"kind": "FASHION_MNIST", "trainLimit": $2, "testLimit": $3},
  "init": {"method": "HE"},
  "noise": {"sigmaV": 1.0},
  "batchSize": 16, "epochs": $4, "seed": 1, "reduction": "SUM", "worldSize": $5,
  "device": "cpu"
})",
                          job.name, job.hidden, job.train_limit, job.test_limit, job.epochs,
                          job.world);
}

std::string ToyJobJson(const ToyJob& job) {
  return absl::Substitute(R"({
  "name": "$0",
  "layers": [
    {"kind": "LINEAR", "inFeatures": 1, "outFeatures": 50},
    {"kind": "RELU"},
    {"kind": "LINEAR", "inFeatures": 50, "outFeatures": 1}
  ],
  "head": {"regression": {}},
  "data": {"kind": "TOY_CUBIC", "toyTrainSize": $1, "toyTestSize": $2},
  "noise": {"sigmaV": 0.06},
  "batchSize": 10, "epochs": $3, "seed": 1, "worldSize": $4, "device": "cpu"
})",
                          job.name, job.train_size, job.test_size, job.epochs, job.world);
}

void ServiceTest::TearDown() {
  if (!HasFailure()) return;
  std::vector<ChildProcess*> all;
  if (coordinator_ != nullptr) all.push_back(coordinator_.get());
  for (auto& w : workers_) all.push_back(w.get());
  for (ChildProcess* p : all) {
    std::cerr << "---- " << p->name() << " (pid " << p->Pid() << ") stderr:\n"
              << Tail(p->Stderr(), 6000) << "\n";
  }
}

void ServiceTest::StartCoordinator(int world, std::vector<std::string> flags,
                                   const std::string& listen, std::vector<std::string> wrapper) {
  flags.insert(flags.begin(), {"--world", std::to_string(world)});
  CoordinatorLaunch launch;
  launch.listen = listen;
  launch.flags = std::move(flags);
  launch.wrapper = std::move(wrapper);
  coordinator_.reset();  // a previous one is killed and reaped
  StartedCoordinator c = testing::StartCoordinator(BinPath("tagi-coordinator"), dir_, launch);
  coordinator_ = std::move(c.process);
  ASSERT_TRUE(c.ok()) << "the coordinator did not start: " << c.error;
  address_ = c.address;
}

ChildProcess& ServiceTest::StartWorker(std::vector<std::string> flags, std::string coord,
                                       std::vector<std::string> wrapper) {
  std::vector<std::string> argv = std::move(wrapper);
  argv.insert(argv.end(),
              {WorkerBinary(), "--coord", coord.empty() ? address_ : coord, "--threads", "1",
               "--connect-timeout", "20s", "--collective-timeout", "20s"});
  argv.insert(argv.end(), flags.begin(), flags.end());
  const std::string name = absl::StrCat("worker", workers_.size() + 1);
  workers_.push_back(std::make_unique<ChildProcess>(argv, dir_, name));
  return *workers_.back();
}

ProcessResult ServiceTest::Ctl(const std::vector<std::string>& args, absl::Duration timeout) {
  std::vector<std::string> argv = {BinPath("tagictl"), "--coord", address_};
  argv.insert(argv.end(), ctl_flags_.begin(), ctl_flags_.end());
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessResult r = RunProcess(argv, timeout);
  EXPECT_FALSE(r.timed_out) << "tagictl " << absl::StrJoin(args, " ") << " ran past " << timeout;
  return r;
}

ChildProcess& ServiceTest::StartCtl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinPath("tagictl"), "--coord", address_};
  argv.insert(argv.end(), ctl_flags_.begin(), ctl_flags_.end());
  argv.insert(argv.end(), args.begin(), args.end());
  workers_.push_back(
      std::make_unique<ChildProcess>(argv, dir_, absl::StrCat("tagictl", workers_.size() + 1)));
  return *workers_.back();
}

std::string ServiceTest::WriteJob(const std::string& name, const std::string& json) {
  return dir_.Write(name + ".json", json);
}

std::string ServiceTest::Submit(const std::string& job_file) {
  const ProcessResult r = Ctl({"submit", job_file});
  EXPECT_EQ(r.exit_code, 0) << "tagictl submit " << job_file << ": " << r.err;
  if (r.exit_code != 0) return "";
  return std::string(absl::StripAsciiWhitespace(r.out));
}

std::optional<tagi::v1::Job> ServiceTest::GetJob(const std::string& id) {
  const ProcessResult r = Ctl({"status", id, "--json"});
  EXPECT_EQ(r.exit_code, 0) << "tagictl status " << id << " --json: " << r.err;
  if (r.exit_code != 0) return std::nullopt;
  tagi::v1::Job job;
  const auto st = google::protobuf::util::JsonStringToMessage(r.out, &job);
  EXPECT_TRUE(st.ok()) << "status --json printed something that is not a Job: " << st << "\n"
                       << r.out;
  if (!st.ok()) return std::nullopt;
  return job;
}

std::optional<tagi::v1::Job> ServiceTest::WaitForJob(
    const std::string& id, const std::function<bool(const tagi::v1::Job&)>& done,
    absl::Duration timeout) {
  std::optional<tagi::v1::Job> last;
  WaitUntil(
      [&] {
        last = GetJob(id);
        return !last.has_value() || done(*last);  // a broken tagictl ends the wait
      },
      timeout, absl::Milliseconds(100));
  return last;
}

std::vector<WorkerRow> ServiceTest::Workers() {
  const ProcessResult r = Ctl({"workers"});
  EXPECT_EQ(r.exit_code, 0) << "tagictl workers: " << r.err;
  std::vector<WorkerRow> rows;
  if (r.exit_code != 0) return rows;
  bool header = true;
  for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipWhitespace())) {
    if (header) {  // ID STATE JOB RANK DEVICE ADDRESS HOST
      header = false;
      continue;
    }
    std::vector<std::string> cols = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (cols.size() < 3) continue;
    rows.push_back({cols[0], cols[1], cols[2]});
  }
  return rows;
}

bool ServiceTest::WaitForWorkers(size_t n, const std::string& state, absl::Duration timeout) {
  return WaitUntil(
      [&] {
        const std::vector<WorkerRow> rows = Workers();
        if (rows.size() != n) return false;
        for (const WorkerRow& w : rows) {
          if (w.state != state) return false;
        }
        return true;
      },
      timeout, absl::Milliseconds(100));
}

}  // namespace tagi::testing
