// Data paths from hostile job submitters (issue 14): a worker reads job
// data only under its --data-root directories, and no failure reason shows
// a file's content or tells whether a file exists. Real coordinator and
// workers on loopback.
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/service/service_cluster.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "root:$6$s3cr3t-hash:19000:0:99999:7:::";

std::string MnistJobJson(const std::string& images, const std::string& labels) {
  return absl::Substitute(R"({
  "name": "probe",
  "layers": [{"kind": "LINEAR", "inFeatures": 784, "outFeatures": 11}],
  "head": {"classification": {"numClasses": 10}},
  "data": {"kind": "MNIST", "trainImages": "$0", "trainLabels": "$1",
           "testImages": "$0", "testLabels": "$1"},
  "noise": {"sigmaV": 1.0},
  "batchSize": 16, "epochs": 1, "seed": 1, "worldSize": 1, "device": "cpu"
})",
                          images, labels);
}

class HostileDataTest : public ServiceTest {
 protected:
  // Submits the job, waits for it to fail, and returns everything a client
  // can see of it: the reason, `tagictl status`, `tagictl list`.
  std::string FailedJobAsSeen(const std::string& json) {
    const std::string id = Submit(WriteJob("probe.json", json));
    if (id.empty()) return "";
    const auto job = WaitForJob(
        id, [](const tagi::v1::Job& j) { return j.state() == tagi::v1::FAILED; },
        absl::Seconds(60));
    EXPECT_TRUE(job.has_value() && job->state() == tagi::v1::FAILED);
    const ProcessResult status = Ctl({"status", id});
    const ProcessResult list = Ctl({"list"});
    return absl::StrCat(job.has_value() ? job->reason() : "", "\n", status.out, status.err, "\n",
                        list.out, list.err);
  }
};

TEST_F(HostileDataTest, FilesOutsideTheDataRootsAreRefusedWithoutContentOrExistence) {
  // The secret sits outside the roots; another file inside them is readable.
  std::filesystem::create_directories(dir_.File("private"));
  const std::string secret = dir_.Write("private/shadow", kSecret);
  const std::string roots = dir_.File("data");
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  StartWorker({"--data-root", roots});
  ASSERT_TRUE(WaitForWorkers(1, "IDLE", absl::Seconds(20)));

  const std::string seen = FailedJobAsSeen(MnistJobJson(secret, secret));
  EXPECT_THAT(seen, HasSubstr("is outside the directories this worker reads data from"));
  EXPECT_THAT(seen, HasSubstr("--data-root"));
  EXPECT_THAT(seen, Not(HasSubstr("s3cr3t")));
  EXPECT_THAT(seen, Not(HasSubstr("72 6f")));  // "ro", as the IDX reader used to print
  EXPECT_THAT(seen, Not(HasSubstr("exist")));

  // A file that does not exist gets the very same answer: no probing.
  const std::string absent = dir_.File("private/absent");
  const std::string seen_absent = FailedJobAsSeen(MnistJobJson(absent, absent));
  EXPECT_THAT(seen_absent, HasSubstr("is outside the directories this worker reads data from"));
  EXPECT_THAT(seen_absent, Not(HasSubstr("exist")));

  // Nor does `..` or a symlink inside a root lead out of it.
  const std::string escape = absl::StrCat(roots, "/../private/shadow");
  EXPECT_THAT(FailedJobAsSeen(MnistJobJson(escape, escape)),
              HasSubstr("is outside the directories"));
  std::filesystem::create_directories(roots);
  std::filesystem::create_symlink(secret, roots + "/link");
  const std::string link = roots + "/link";
  const std::string seen_link = FailedJobAsSeen(MnistJobJson(link, link));
  EXPECT_THAT(seen_link, HasSubstr("is outside the directories"));
  EXPECT_THAT(seen_link, Not(HasSubstr("s3cr3t")));
}

// A job's starting model (init_from) is a file the job names too: the same
// roots, the same silence about what it holds.
TEST_F(HostileDataTest, AnInitFromFileOutsideTheRootsOrNotAModelShowsNoContent) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  std::filesystem::create_directories(dir_.File("private"));
  std::filesystem::create_directories(dir_.File("data"));
  const std::string secret = dir_.Write("private/shadow", kSecret);
  const std::string inside = dir_.Write("data/notes.tagi", kSecret);
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  StartWorker({"--data-root", absl::StrCat("/usr/share/datasets,", dir_.File("data"))});
  ASSERT_TRUE(WaitForWorkers(1, "IDLE", absl::Seconds(20)));
  auto job = [](const std::string& init_from) {
    return absl::Substitute(R"({
  "name": "start", "layers": [{"kind": "LINEAR", "inFeatures": 784, "outFeatures": 11}],
  "head": {"classification": {"numClasses": 10}},
  "data": {"kind": "FASHION_MNIST", "trainLimit": 64, "testLimit": 16},
  "noise": {"sigmaV": 1.0}, "batchSize": 16, "epochs": 1, "worldSize": 1, "device": "cpu",
  "initFrom": "$0"
})",
                            init_from);
  };
  const std::string outside = FailedJobAsSeen(job(secret));
  EXPECT_THAT(outside, HasSubstr("initFrom"));
  EXPECT_THAT(outside, HasSubstr("is outside the directories this worker reads data from"));
  EXPECT_THAT(outside, Not(HasSubstr("s3cr3t")));
  const std::string not_a_model = FailedJobAsSeen(job(inside));
  EXPECT_THAT(not_a_model, HasSubstr("initFrom: " + inside));
  EXPECT_THAT(not_a_model, Not(HasSubstr("s3cr3t")));
  EXPECT_THAT(not_a_model, Not(HasSubstr("root:")));

  // And a real model of the job's network, inside the roots, starts it.
  const std::string start = dir_.File("data/start.tagi");
  const std::string first = WriteJob("first.json", job(""));
  const ProcessResult trained =
      RunProcess({std::string(TAGI_BIN_DIR) + "/tagi-train", first, "--out", start},
                 absl::Seconds(60));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string id = Submit(WriteJob("second.json", job(start)));
  const auto done = WaitForJob(
      id,
      [](const tagi::v1::Job& j) {
        return j.state() == tagi::v1::SUCCEEDED || j.state() == tagi::v1::FAILED ||
               j.state() == tagi::v1::CANCELLED;
      },
      absl::Seconds(60));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state(), tagi::v1::SUCCEEDED) << done->reason();
}

TEST_F(HostileDataTest, AFileInsideTheRootsThatIsNotDataShowsNoContent) {
  std::filesystem::create_directories(dir_.File("data"));
  const std::string secret = dir_.Write("data/notes.idx", kSecret);
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  StartWorker({"--data-root", dir_.File("data")});
  ASSERT_TRUE(WaitForWorkers(1, "IDLE", absl::Seconds(20)));
  const std::string seen = FailedJobAsSeen(MnistJobJson(secret, secret));
  EXPECT_THAT(seen, HasSubstr("not an IDX file"));
  EXPECT_THAT(seen, Not(HasSubstr("s3cr3t")));
  EXPECT_THAT(seen, Not(HasSubstr("72 6f")));
}

}  // namespace
}  // namespace tagi::testing

namespace tagi::testing {
namespace {

std::string KindJobJson(const std::string& data) {
  return absl::Substitute(R"({
  "name": "probe",
  "input": {"channels": 1, "height": 4, "width": 4},
  "layers": [{"kind": "LINEAR", "inFeatures": 16, "outFeatures": 3}],
  "head": {"classification": {"numClasses": 3}},
  "data": $0,
  "noise": {"sigmaV": 1.0},
  "batchSize": 4, "epochs": 1, "seed": 1, "worldSize": 1, "device": "cpu"
})",
                          data);
}

// The data kinds a user brings: the same roots, links refused, and the
// readers' messages name the fault without the bytes.
TEST_F(HostileDataTest, NewDataKindsStayInTheRootsAndShowNoContent) {
  std::filesystem::create_directories(dir_.File("private/cls"));
  const std::string secret = dir_.Write("private/shadow", kSecret);
  dir_.Write("private/cls/x.png", kSecret);
  const std::string roots = dir_.File("data");
  std::filesystem::create_directories(roots + "/folder/a");
  std::filesystem::create_symlink(secret, roots + "/link.npz");
  std::filesystem::create_symlink(dir_.File("private/cls"), roots + "/folder/b");
  const std::string inside = dir_.Write("data/shadow.npz", kSecret);
  const std::string csv = dir_.Write("data/shadow.csv", "user,s3cr3t-hash\nroot,s3cr3t\n");
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  StartWorker({"--data-root", roots});
  ASSERT_TRUE(WaitForWorkers(1, "IDLE", absl::Seconds(20)));

  const std::string link = FailedJobAsSeen(KindJobJson(absl::Substitute(
      R"({"kind": "NUMPY", "npz": "$0/link.npz", "holdoutFraction": 0.5})", roots)));
  EXPECT_THAT(link, HasSubstr("is outside the directories"));
  const std::string npz = FailedJobAsSeen(KindJobJson(
      absl::Substitute(R"({"kind": "NUMPY", "npz": "$0", "holdoutFraction": 0.5})", inside)));
  EXPECT_THAT(npz, HasSubstr("not a readable NPZ file"));
  const std::string folder = FailedJobAsSeen(KindJobJson(absl::Substitute(
      R"({"kind": "IMAGE_FOLDER", "trainDir": "$0/folder", "holdoutFraction": 0.5})", roots)));
  EXPECT_THAT(folder, HasSubstr("is a symlink"));
  const std::string labels = FailedJobAsSeen(KindJobJson(absl::Substitute(
      R"({"kind": "CSV_CLASSIFICATION", "trainCsv": "$0", "csvHasHeader": true,
          "labelColumn": "y", "holdoutFraction": 0.5})",
      csv)));
  EXPECT_THAT(labels, HasSubstr("the header has no column named"));
  for (const std::string& seen : {link, npz, folder, labels}) {
    EXPECT_THAT(seen, Not(HasSubstr("s3cr3t")));
    EXPECT_THAT(seen, Not(HasSubstr("root:")));
  }
}

}  // namespace
}  // namespace tagi::testing
