// Bounded job records with the real binaries: `tagictl list` works with
// many jobs named at the longest length allowed, a longer name and a
// network whose model could not be uploaded are refused at submission with
// a message that says why, and nothing is added.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "tests/service/service_cluster.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;

class JobRecordsTest : public ServiceTest {};

TEST_F(JobRecordsTest, ListWorksWithTheLongestNamesAndLongerOnesAreRefused) {
  StartCoordinator(1);
  // No worker: the jobs stay queued, each with a name of the largest size.
  for (int i = 0; i < 20; ++i) {
    ToyJob job;
    job.name = absl::StrCat(i, std::string(kMaxJobNameBytes - std::to_string(i).size(), 'x'));
    ASSERT_FALSE(Submit(WriteJob(absl::StrCat("job", i), ToyJobJson(job))).empty());
  }
  const ProcessResult list = Ctl({"list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(list.out, '\n', absl::SkipEmpty())).size(),
            21u);  // the header and the 20 jobs

  ToyJob longer;
  longer.name = std::string(kMaxJobNameBytes + 1, 'y');
  const ProcessResult refused = Ctl({"submit", WriteJob("longer", ToyJobJson(longer))});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("name: 257 bytes; at most 256 are allowed"));
  ToyJob escape;
  escape.name = "evil\\u001b[2J";
  const ProcessResult control = Ctl({"submit", WriteJob("escape", ToyJobJson(escape))});
  EXPECT_NE(control.exit_code, 0);
  EXPECT_THAT(control.err, HasSubstr("control character U+001B"));
  EXPECT_EQ(Ctl({"list"}).out, list.out);  // nothing was added
}

TEST_F(JobRecordsTest, NetworkTooBigToUploadIsRefusedAtSubmit) {
  StartCoordinator(1);
  // About 320 M parameters: within the model spec's 2^31, but 2.4 GiB of
  // means and variances, more than a model upload may take (2 GiB).
  const std::string job = R"({
  "name": "too-big",
  "layers": [
    {"kind": "LINEAR", "inFeatures": 784, "outFeatures": 65536},
    {"kind": "RELU"},
    {"kind": "LINEAR", "inFeatures": 65536, "outFeatures": 4096},
    {"kind": "RELU"},
    {"kind": "LINEAR", "inFeatures": 4096, "outFeatures": 11}
  ],
  "head": {"classification": {"numClasses": 10}},
  "data": {"kind": "FASHION_MNIST"},
  "noise": {"sigmaV": 1.0},
  "batchSize": 1, "epochs": 1, "worldSize": 1, "device": "cpu"
})";
  const ProcessResult r = Ctl({"submit", WriteJob("big", job)});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("parameters"));
  EXPECT_THAT(r.err, HasSubstr("more than the 2048 MiB the coordinator accepts"));
  EXPECT_THAT(Ctl({"list"}).out, ::testing::Not(HasSubstr("too-big")));
}

}  // namespace
}  // namespace tagi::testing
