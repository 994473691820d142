// What a rank may report of its progress (coordinator/progress_check.h).
#include "coordinator/progress_check.h"

#include <cmath>
#include <functional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi::coordinator {
namespace {

using ::testing::HasSubstr;
using tagi::v1::EpochMetrics;
using tagi::v1::JobProgress;

// Two finished epochs of a classification job, as an honest rank 0 sends them.
JobProgress Honest() {
  JobProgress p;
  p.set_epoch(2);
  p.set_step(30);
  p.set_steps_per_epoch(469);
  p.set_global_step(968);
  p.set_total_steps(1407);
  p.set_samples_per_second(5120.5);
  p.set_eta_seconds(11.2);
  p.set_step_seconds(0.02);
  for (int e = 1; e <= 2; ++e) {
    EpochMetrics* m = p.add_epochs();
    m->set_epoch(e);
    m->set_train_accuracy(1.0);  // the bounds themselves are fine
    m->set_test_accuracy(0.85);
    m->set_test_log_likelihood(-0.41);
    m->set_test_nll(0.41);
    m->set_test_ece(0.02);
    m->set_test_brier(2.0 * (1 + 1e-7));  // a bound passed by rounding only
    m->set_sigma_v(0.0f);
    m->set_seconds(9.5);
  }
  return p;
}

TEST(ProgressProblem, AnHonestReportPasses) {
  EXPECT_EQ(ProgressProblem(Honest(), 3), "");
  EXPECT_EQ(ProgressProblem(JobProgress(), 1), "");  // before the first step
}

TEST(ProgressProblem, ValuesNoTrainingProducesAreNamed) {
  const struct {
    std::function<void(JobProgress&)> spoil;
    const char* expected;
  } cases[] = {
      {[](JobProgress& p) { p.mutable_epochs(1)->set_test_accuracy(0.999 + 1); },
       "epoch 2: testAccuracy is 1.999 (not in [0, 1])"},
      {[](JobProgress& p) { p.mutable_epochs(0)->set_train_accuracy(NAN); },
       "epoch 1: trainAccuracy is nan"},
      {[](JobProgress& p) { p.mutable_epochs(0)->set_test_ece(-0.1); }, "testEce is -0.1"},
      {[](JobProgress& p) { p.mutable_epochs(0)->set_test_brier(2.5); },
       "testBrier is 2.5 (not in [0, 2])"},
      {[](JobProgress& p) { p.mutable_epochs(0)->set_test_coverage_95(1.5); }, "testCoverage95"},
      {[](JobProgress& p) { p.mutable_epochs(0)->set_test_rmse(INFINITY); },
       "testRmse is inf (not a finite number >= 0)"},
      {[](JobProgress& p) { p.mutable_epochs(0)->set_seconds(-1); }, "seconds is -1"},
      {[](JobProgress& p) { p.mutable_epochs(0)->set_test_log_likelihood(-INFINITY); },
       "testLogLikelihood -inf or testNll 0.41 is not finite"},
      {[](JobProgress& p) { p.set_samples_per_second(NAN); }, "samplesPerSecond is nan"},
      {[](JobProgress& p) { p.set_eta_seconds(-5); }, "etaSeconds is -5"},
      {[](JobProgress& p) { p.mutable_epochs(1)->set_epoch(1); },
       "epochs[].epoch 1 is not in increasing order within 1 to 3"},
      {[](JobProgress& p) { p.mutable_epochs(1)->set_epoch(4); }, "epochs[].epoch 4"},
      {[](JobProgress& p) { p.mutable_epochs(0)->set_epoch(0); }, "epochs[].epoch 0"},
      {[](JobProgress& p) { p.set_epoch(7); }, "epoch 7 is past the job's 3 epochs"},
  };
  for (const auto& c : cases) {
    JobProgress p = Honest();
    c.spoil(p);
    EXPECT_THAT(ProgressProblem(p, 3), HasSubstr(c.expected));
  }
}

}  // namespace
}  // namespace tagi::coordinator
