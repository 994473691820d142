// A state dir that fills up or turns read-only under a running job, with the
// real binaries: /readyz answers 503 naming the problem, the job is not
// reported final while its end cannot be saved, it is neither lost nor
// resurrected by a coordinator restart, and it finishes once the disk is
// back.
//
// The state dir is a small tmpfs in a user + mount namespace the test makes
// (`unshare -rm`, held by a sleeping process); the coordinator runs in it
// (`nsenter`), the worker and tagictl outside. Skipped, with the reason,
// where this host cannot make such a namespace.
#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include <csignal>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/substitute.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "tests/service/service_cluster.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;

// The path of a system tool (the process helpers exec without a PATH search).
std::string Tool(const std::string& name) {
  for (const char* dir : {"/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/"}) {
    if (std::filesystem::exists(std::string(dir) + name)) return std::string(dir) + name;
  }
  return name;
}

class DiskFaultTest : public ServiceTest {
 protected:
  void SetUp() override {
    const ProcessResult probe = RunProcess(
        {Tool("unshare"), "-rm", Tool("sh"), "-c", absl::StrCat("mount -t tmpfs -o size=1m tmpfs ", dir_.path())},
        absl::Seconds(10));
    if (probe.exit_code != 0) {
      GTEST_SKIP() << "cannot make a user + mount namespace with a tmpfs here (unshare -rm: "
                   << probe.err << ")";
    }
  }
  void TearDown() override {
    if (HasFailure() && coordinator_ != nullptr) {
      std::fprintf(stderr, "--- coordinator (in the namespace) stderr ---\n%s\n",
                   ReadFileOrEmpty(dir_.File(absl::StrCat(name_, ".err"))).c_str());
    }
    coordinator_.reset();
    ServiceTest::TearDown();
  }

  // A tmpfs of `size` at mnt_, in a namespace held by a sleeping process.
  void StartNamespace(const std::string& size) {
    mnt_ = dir_.File("mnt");
    std::filesystem::create_directories(mnt_);
    const std::string ready = dir_.File("ns.ready");
    holder_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{Tool("unshare"), "-rm", Tool("sh"), "-c",
                                 absl::StrCat("mount -t tmpfs -o size=", size, " tmpfs ", mnt_,
                                              " && mkdir ", mnt_, "/state && touch ", ready,
                                              " && exec sleep 600")},
        dir_, "namespace");
    ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(ready); }, absl::Seconds(10)))
        << "the namespace did not come up";
  }
  std::vector<std::string> Enter() {
    return {Tool("nsenter"), "-t", std::to_string(holder_->Pid()), "-U", "-m",
            "--preserve-credentials", "--"};
  }
  ProcessResult InNamespace(const std::string& script) {
    std::vector<std::string> argv = Enter();
    argv.insert(argv.end(), {Tool("sh"), "-c", script});
    return RunProcess(argv, absl::Seconds(30));
  }
  // The coordinator in the namespace, on `listen` (the same address after
  // a restart, so that the worker finds it again).
  void StartCoordinatorInNamespace(const std::string& listen = "127.0.0.1:0") {
    coordinator_.reset();
    name_ = absl::StrCat("coordinator", ++starts_);
    const std::string wrapper = dir_.Write(
        "coordinator.sh", absl::StrCat("#!/bin/sh\nexec ", absl::StrJoin(Enter(), " "), " ",
                                       BinPath("tagi-coordinator"), " \"$@\"\n"));
    std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
    CoordinatorLaunch launch;
    launch.listen = listen;
    launch.name = name_;
    const std::string http_port = dir_.File(name_ + ".http");
    launch.flags = {"--world", "1", "--state-dir", mnt_ + "/state", "--http", "127.0.0.1:0",
                    "--http-port-file", http_port};
    StartedCoordinator c = testing::StartCoordinator(wrapper, dir_, launch);
    coordinator_ = std::move(c.process);
    ASSERT_TRUE(c.ok()) << "the coordinator did not start: " << c.error;
    address_ = c.address;
    ASSERT_TRUE(WaitUntil([&] { return !ReadFileOrEmpty(http_port).empty(); }, absl::Seconds(10)));
    http_port_ = std::stoi(ReadFileOrEmpty(http_port));
  }
  void KillCoordinator() {
    coordinator_->Signal(SIGKILL);
    ASSERT_TRUE(coordinator_->WaitExit(absl::Seconds(10)).has_value());
  }
  // GET /readyz: (status, body); status 0 when it did not answer.
  std::pair<int, std::string> Readyz() {
    httplib::Client client("127.0.0.1", http_port_);
    client.set_connection_timeout(2);
    client.set_read_timeout(2);
    auto res = client.Get("/readyz");
    if (!res) return {0, ""};
    return {res->status, res->body};
  }
  bool WaitReadyz(int status, const std::string& needle, absl::Duration timeout) {
    std::pair<int, std::string> last;
    const bool ok = WaitUntil(
        [&] {
          last = Readyz();
          return last.first == status && last.second.find(needle) != std::string::npos;
        },
        timeout, absl::Milliseconds(200));
    if (!ok) ADD_FAILURE() << "/readyz: " << last.first << " " << last.second;
    return ok;
  }
  ProcessResult TagiCtl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinPath("tagictl"), "--coord", address_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, absl::Seconds(60));
  }
  std::optional<tagi::v1::Job> Status(const std::string& id) {
    const ProcessResult r = TagiCtl({"status", id, "--json"});
    tagi::v1::Job job;
    if (r.exit_code != 0 ||
        !google::protobuf::util::JsonStringToMessage(r.out, &job).ok()) {
      return std::nullopt;
    }
    return job;
  }
  std::optional<tagi::v1::Job> WaitStatus(const std::string& id,
                                          const std::function<bool(const tagi::v1::Job&)>& done,
                                          absl::Duration timeout) {
    std::optional<tagi::v1::Job> last;
    WaitUntil(
        [&] {
          last = Status(id);
          return last.has_value() && done(*last);
        },
        timeout, absl::Milliseconds(200));
    return last;
  }
  // The cubic regression with a 1-256-256-1 network: about 66 k
  // parameters, so its model and snapshots take about 530 KB each.
  std::string SubmitJob(const std::string& name, int epochs) {
    const std::string json = absl::Substitute(R"({
  "name": "$0",
  "layers": [
    {"kind": "LINEAR", "inFeatures": 1, "outFeatures": 256},
    {"kind": "RELU"},
    {"kind": "LINEAR", "inFeatures": 256, "outFeatures": 256},
    {"kind": "RELU"},
    {"kind": "LINEAR", "inFeatures": 256, "outFeatures": 1}
  ],
  "head": {"regression": {}},
  "data": {"kind": "TOY_CUBIC", "toyTrainSize": 200, "toyTestSize": 50},
  "noise": {"sigmaV": 0.06},
  "batchSize": 10, "epochs": $1, "seed": 1, "worldSize": 1, "device": "cpu"
})",
                                              name, epochs);
    const ProcessResult r = TagiCtl({"submit", WriteJob(name, json)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id = r.out;
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    return id;
  }

  std::string mnt_;
  std::string name_;
  int starts_ = 0;
  std::string address_;
  int http_port_ = 0;
  std::unique_ptr<ChildProcess> holder_;
  std::unique_ptr<ChildProcess> coordinator_;
};

bool Final(const tagi::v1::Job& j) {
  return j.state() == tagi::v1::SUCCEEDED || j.state() == tagi::v1::FAILED ||
         j.state() == tagi::v1::CANCELLED;
}

TEST_F(DiskFaultTest, FullStateDirMakesTheJobWaitAndItsOutcomeSurvivesRestarts) {
  StartNamespace("48m");
  StartCoordinatorInNamespace();
  StartWorker({}, address_);
  ASSERT_TRUE(WaitReadyz(200, "ok", absl::Seconds(10)));
  // Leave 96 KiB: the job's record fits, its 530 KB model and snapshots do not.
  const ProcessResult fill = InNamespace(absl::StrCat(
      "avail=$(df --output=avail -B1 ", mnt_, " | tail -1); head -c $((avail - 98304)) ",
      "/dev/zero > ", mnt_, "/fill"));
  ASSERT_EQ(fill.exit_code, 0) << fill.err;
  const std::string id = SubmitJob("full-disk", 3);
  ASSERT_FALSE(id.empty());

  ASSERT_TRUE(WaitReadyz(503, "No space left on device", absl::Seconds(60)));
  auto j = WaitStatus(
      id, [](const tagi::v1::Job& j) { return j.reason().find("ending as") != std::string::npos; },
      absl::Seconds(60));
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->state(), tagi::v1::RUNNING);
  EXPECT_THAT(j->reason(), HasSubstr("ending as SUCCEEDED"));
  EXPECT_LE(j->restarts(), 1u);  // no generations burnt on a disk that is full
  const std::pair<int, std::string> metrics = [&] {
    httplib::Client client("127.0.0.1", http_port_);
    auto res = client.Get("/metrics");
    return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
  }();
  EXPECT_THAT(metrics.second, HasSubstr("tagi_coordinator_state_write_failures_total{kind=\"model\"}"));
  EXPECT_THAT(metrics.second, HasSubstr("tagi_coordinator_state_dir_writable 0"));

  // A crash while the disk is full: the job is neither lost nor final.
  const std::string address = address_;
  KillCoordinator();
  StartCoordinatorInNamespace(address);
  j = Status(id);
  ASSERT_TRUE(j.has_value());
  EXPECT_FALSE(Final(*j)) << j->DebugString();
  EXPECT_GE(j->restarts(), 1u);

  // Space comes back: the job finishes and says so.
  ASSERT_EQ(InNamespace(absl::StrCat("rm ", mnt_, "/fill")).exit_code, 0);
  j = WaitStatus(id, Final, absl::Seconds(90));
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->state(), tagi::v1::SUCCEEDED) << j->reason();
  EXPECT_TRUE(WaitReadyz(200, "ok", absl::Seconds(10)));
  EXPECT_EQ(TagiCtl({"download", id, "-o", dir_.File("model.tagi")}).exit_code, 0);

  KillCoordinator();
  StartCoordinatorInNamespace(address);
  j = Status(id);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->state(), tagi::v1::SUCCEEDED);
}

TEST_F(DiskFaultTest, ReadOnlyStateDirHoldsACancelUntilItIsSavedAndItStaysCancelled) {
  StartNamespace("64m");
  StartCoordinatorInNamespace();
  StartWorker({}, address_);
  const std::string id = SubmitJob("read-only", 5000);  // still running when the disk turns
                                                       // read-only
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitStatus(
                  id,
                  [](const tagi::v1::Job& j) {
                    return j.state() == tagi::v1::RUNNING && j.progress().global_step() > 0;
                  },
                  absl::Seconds(60))
                  .has_value());

  ASSERT_EQ(InNamespace(absl::StrCat("mount -o remount,ro ", mnt_)).exit_code, 0);
  ASSERT_TRUE(WaitReadyz(503, "read-only", absl::Seconds(10)));
  (void)TagiCtl({"cancel", id});
  auto j = Status(id);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->state(), tagi::v1::RUNNING);  // not reported CANCELLED: it is not saved
  EXPECT_THAT(j->reason(), HasSubstr("ending as CANCELLED"));

  ASSERT_EQ(InNamespace(absl::StrCat("mount -o remount,rw ", mnt_)).exit_code, 0);
  j = WaitStatus(id, Final, absl::Seconds(30));
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->state(), tagi::v1::CANCELLED);
  EXPECT_TRUE(WaitReadyz(200, "ok", absl::Seconds(15)));

  // A restart never brings it back.
  const std::string address = address_;
  const uint64_t generation = j->generation();
  KillCoordinator();
  StartCoordinatorInNamespace(address);
  absl::SleepFor(absl::Seconds(2));  // time for the worker to reconnect and be placed, were it
  j = Status(id);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->state(), tagi::v1::CANCELLED);
  EXPECT_EQ(j->generation(), generation);
}

}  // namespace
}  // namespace tagi::testing
