// What a rank may report of its progress (ReportProgress, a session
// message, FinishJob), as a pure function. The coordinator keeps rank 0's
// epochs as the job's metrics and exports them; values no training
// produces (an accuracy above 1, a NaN, an epoch past the job's last) are
// refused rather than shown to users and dashboards.
#ifndef TAGI_COORDINATOR_PROGRESS_CHECK_H_
#define TAGI_COORDINATOR_PROGRESS_CHECK_H_

#include <cstdint>
#include <string>

#include "tagi/v1/jobs.pb.h"

namespace tagi::coordinator {

// Empty when every value of `p` is one a job of `epochs` epochs can
// report; else what is wrong, in the API's field names: every number
// finite and not negative, accuracies, coverages and the calibration error
// within [0, 1], the Brier score within [0, 2], epochs numbered 1 to
// `epochs` in increasing order, the epoch in progress at most `epochs`.
// (The step is not checked against steps_per_epoch: an elastic job's epoch
// may have begun under another world, with more steps.)
std::string ProgressProblem(const tagi::v1::JobProgress& p, uint64_t epochs);

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_PROGRESS_CHECK_H_
