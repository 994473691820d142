#include "coordinator/progress_check.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tagi::coordinator {
namespace {

// The first of `values` (name, value) that is not finite or is outside
// [0, most]; empty when none.
std::string OutOfRange(std::initializer_list<std::pair<const char*, double>> values,
                       double most = INFINITY) {
  for (const auto& [name, v] : values) {
    // Bounded sums of float fractions may pass their bound by rounding.
    if (!std::isfinite(v) || v < 0.0 || v > most * (1.0 + 1e-6)) {
      return std::isfinite(most) ? absl::StrFormat("%s is %g (not in [0, %g])", name, v, most)
                                 : absl::StrFormat("%s is %g (not a finite number >= 0)", name, v);
    }
  }
  return "";
}

}  // namespace

std::string ProgressProblem(const tagi::v1::JobProgress& p, uint64_t epochs) {
  std::string wrong =
      OutOfRange({{"samplesPerSecond", p.samples_per_second()},
                  {"etaSeconds", p.eta_seconds()},
                  {"stepSeconds", p.step_seconds()},
                  {"allreduceSeconds", p.allreduce_seconds()},
                  {"allreduceWaitSeconds", p.allreduce_wait_seconds()},
                  {"rendezvousSeconds", p.rendezvous_seconds()},
                  {"dataSeconds", p.data_seconds()},
                  {"groupSeconds", p.group_seconds()},
                  {"modelSeconds", p.model_seconds()}});
  if (!wrong.empty()) return wrong;
  if (p.epoch() > epochs) {
    return absl::StrFormat("epoch %d is past the job's %d epochs", p.epoch(), epochs);
  }
  uint64_t last = 0;
  for (const tagi::v1::EpochMetrics& e : p.epochs()) {
    if (e.epoch() <= last || e.epoch() > epochs) {
      return absl::StrFormat("epochs[].epoch %d is not in increasing order within 1 to %d",
                             e.epoch(), epochs);
    }
    last = e.epoch();
    wrong = OutOfRange({{"trainAccuracy", e.train_accuracy()},
                        {"testAccuracy", e.test_accuracy()},
                        {"testEce", e.test_ece()},
                        {"testCoverage68", e.test_coverage_68()},
                        {"testCoverage95", e.test_coverage_95()}},
                       1.0);
    if (wrong.empty()) wrong = OutOfRange({{"testBrier", e.test_brier()}}, 2.0);
    if (wrong.empty()) {
      wrong = OutOfRange({{"testRmse", e.test_rmse()},
                          {"sigmaV", e.sigma_v()},
                          {"seconds", e.seconds()},
                          {"testMeanStd", e.test_mean_std()}});
    }
    if (wrong.empty() &&
        (!std::isfinite(e.test_log_likelihood()) || !std::isfinite(e.test_nll()))) {
      wrong = absl::StrFormat("testLogLikelihood %g or testNll %g is not finite",
                              e.test_log_likelihood(), e.test_nll());
    }
    if (!wrong.empty()) return absl::StrCat("epoch ", e.epoch(), ": ", wrong);
  }
  return "";
}

}  // namespace tagi::coordinator
