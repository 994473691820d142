// tagi-run end to end: the real binary starts a real coordinator and
// workers on loopback, and every run, whatever its end (success, a failed
// job, Ctrl-C, a refused override, tagi-run itself killed), leaves no
// process behind and (except when killed) no directory.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/testing/subprocess.h"

namespace {

using ::tagi::testing::ChildProcess;
using ::tagi::testing::ExitStatus;
using ::tagi::testing::TempDir;
using ::testing::HasSubstr;

const std::string kBin = TAGI_BIN_DIR;

std::string ToyJob(const TempDir& dir, int epochs) {
  return dir.Write("toy.json", absl::Substitute(R"({"name": "toy",
    "layers": [{"linear": {"inFeatures": 1, "outFeatures": 32}}, {"relu": {}},
               {"linear": {"inFeatures": 32, "outFeatures": 1}}],
    "head": {"regression": {}},
    "data": {"kind": "TOY_CUBIC", "toyTrainSize": 400, "toyTestSize": 50},
    "noise": {"sigmaV": 0.3}, "batchSize": 10, "epochs": $0, "seed": 1, "worldSize": 1,
    "device": "cpu"})",
                                                 epochs));
}

// The private directory tagi-run names on stderr ("(/tmp/tagi-run.XXXXXX)").
std::string RunDir(const std::string& err) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex(R"(\((/[^)]*tagi-run\.[A-Za-z0-9]+)\))"))) return "";
  return m[1];
}

// The processes whose command line names `dir` (the coordinator's state
// dir and the workers' token file are under it).
std::vector<std::string> ProcessesUsing(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(dir) != std::string::npos) found.push_back(name);
  }
  return found;
}

bool NothingLeft(const std::string& dir) {
  return tagi::testing::WaitUntil([&] { return ProcessesUsing(dir).empty(); }, absl::Seconds(10),
                                  absl::Milliseconds(50));
}

ExitStatus Finish(ChildProcess& run, absl::Duration timeout = absl::Seconds(120)) {
  std::optional<ExitStatus> st = run.WaitExit(timeout);
  EXPECT_TRUE(st.has_value()) << "tagi-run still running; stderr:\n" << run.Stderr();
  if (!st.has_value()) {
    run.Signal(SIGKILL);
    return ExitStatus{};
  }
  return *st;
}

// Waits until tagi-run's job trains; `run_dir`: its private directory.
void AwaitTraining(ChildProcess& run, std::string* run_dir) {
  ASSERT_TRUE(tagi::testing::WaitUntil(
      [&] { return run.Stderr().find("RUNNING") != std::string::npos; }, absl::Seconds(60),
      absl::Milliseconds(20)))
      << run.Stderr();
  *run_dir = RunDir(run.Stderr());
  ASSERT_FALSE(run_dir->empty());
}

TEST(TagiRun, TrainsWithOverridesWritesTheModelAndLeavesNothingBehind) {
  TempDir dir;
  const std::string model = dir.File("model.tagi");
  ChildProcess run({kBin + "/tagi-run", "--nproc", "2", ToyJob(dir, 1), "--set", "epochs=2",
                    "--set=data.toyTrainSize=200", "--out", model},
                   dir, "run");
  const ExitStatus st = Finish(run);
  EXPECT_TRUE(st.ExitedWith(0)) << st.ToString() << "\n" << run.Stderr();
  EXPECT_THAT(run.Stdout(), HasSubstr("SUCCEEDED: trained 2 epochs on 2 workers"));
  EXPECT_THAT(run.Stdout(), HasSubstr("model: " + model));
  std::ifstream in(model, std::ios::binary);
  std::string magic(8, '\0');
  in.read(magic.data(), 8);
  EXPECT_EQ(magic, "TAGIMODL");
  const std::string run_dir = RunDir(run.Stderr());
  ASSERT_FALSE(run_dir.empty()) << run.Stderr();
  EXPECT_FALSE(std::filesystem::exists(run_dir));
  EXPECT_TRUE(NothingLeft(run_dir));
}

TEST(TagiRun, AFailedJobExitsOneWithEveryProcesssLog) {
  TempDir dir;
  const std::string job = dir.Write("csv.json", R"({"name": "missing",
    "layers": [{"linear": {"inFeatures": 3, "outFeatures": 1}}],
    "head": {"regression": {}},
    "data": {"kind": "CSV", "trainCsv": "no-such-file.csv", "testCsv": "no-such-file.csv"},
    "noise": {"sigmaV": 0.3}, "batchSize": 10, "epochs": 1, "device": "cpu"})");
  ChildProcess run({kBin + "/tagi-run", "--nproc", "1", job}, dir, "run");
  const ExitStatus st = Finish(run);
  EXPECT_TRUE(st.ExitedWith(1)) << st.ToString() << "\n" << run.Stderr();
  EXPECT_THAT(run.Stdout(), HasSubstr("FAILED"));
  EXPECT_THAT(run.Stderr(), HasSubstr("---- tagi-coordinator (log) ----"));
  EXPECT_THAT(run.Stderr(), HasSubstr("---- tagi-worker 1 (log) ----"));
  EXPECT_THAT(run.Stderr(), HasSubstr("no-such-file.csv"));
  const std::string run_dir = RunDir(run.Stderr());
  ASSERT_FALSE(run_dir.empty());
  EXPECT_FALSE(std::filesystem::exists(run_dir));
  EXPECT_TRUE(NothingLeft(run_dir));
}

TEST(TagiRun, CtrlCCancelsTheJobAndCleansUp) {
  TempDir dir;
  ChildProcess run({kBin + "/tagi-run", "--nproc", "2", ToyJob(dir, 100000)}, dir, "run");
  std::string run_dir;
  ASSERT_NO_FATAL_FAILURE(AwaitTraining(run, &run_dir));
  run.Signal(SIGINT);
  const ExitStatus st = Finish(run, absl::Seconds(60));
  EXPECT_TRUE(st.ExitedWith(130)) << st.ToString() << "\n" << run.Stderr();
  EXPECT_THAT(run.Stdout(), HasSubstr("CANCELLED: cancelled by the user"));
  EXPECT_THAT(run.Stderr(), HasSubstr("interrupted; cancelling the job"));
  EXPECT_FALSE(std::filesystem::exists(run_dir));
  EXPECT_TRUE(NothingLeft(run_dir));
}

TEST(TagiRun, RefusesABadOverrideBeforeStartingAnything) {
  TempDir dir;
  const std::string job = ToyJob(dir, 1);
  struct Case {
    std::string set;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {"epoch=2", "the job has no field \"epoch\" (did you mean \"epochs\"?)"},
           {"epochs=two", "epochs is an unsigned 32-bit integer; \"two\" is not"},
           {"batchSize=0", "with --set batchSize=0: invalid job"},
           {"layers.1.linear.outFeatures=3", "layers.1 is a relu, not a linear"}}) {
    ChildProcess run({kBin + "/tagi-run", job, "--set", c.set}, dir, "run");
    const ExitStatus st = Finish(run);
    EXPECT_TRUE(st.ExitedWith(2)) << c.set << ": " << st.ToString();
    EXPECT_THAT(run.Stderr(), HasSubstr(c.says));
    EXPECT_THAT(run.Stderr(), ::testing::Not(HasSubstr("coordinator on")));
  }
  ChildProcess missing({kBin + "/tagi-run", job, "--set"}, dir, "missing");
  EXPECT_TRUE(Finish(missing).ExitedWith(2));
  EXPECT_THAT(missing.Stderr(), HasSubstr("--set needs a value"));
}

TEST(TagiRun, ItsProcessesDieWithIt) {
  TempDir dir;
  ChildProcess run({kBin + "/tagi-run", "--nproc", "2", ToyJob(dir, 100000)}, dir, "run");
  std::string run_dir;
  ASSERT_NO_FATAL_FAILURE(AwaitTraining(run, &run_dir));
  ASSERT_EQ(ProcessesUsing(run_dir).size(), 3u);  // the coordinator and two workers
  run.Signal(SIGKILL);
  (void)Finish(run);
  EXPECT_TRUE(NothingLeft(run_dir));
  std::filesystem::remove_all(run_dir);  // a killed tagi-run cannot remove it
}

}  // namespace
