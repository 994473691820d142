#include "ctl/format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/progress_bar.h"

namespace tagi {
namespace {

std::string StateName(tagi::v1::JobState s) { return tagi::v1::JobState_Name(s); }

std::string ProgressText(const tagi::v1::Job& job) {
  const auto& p = job.progress();
  if (p.total_steps() == 0) return "-";
  return absl::StrFormat("%d%%", static_cast<int>(100 * std::min(p.global_step(), p.total_steps()) /
                                                  p.total_steps()));
}

std::string Time(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms),
                          absl::LocalTimeZone());
}

}  // namespace

std::string LatestMetric(const tagi::v1::Job& job) {
  const auto& epochs = job.progress().epochs();
  if (epochs.empty()) return "";
  const auto& last = epochs[epochs.size() - 1];
  if (job.spec().head().has_classification()) {
    return absl::StrFormat("test accuracy %.2f%%", 100.0 * last.test_accuracy());
  }
  return absl::StrFormat("test RMSE %.4f", last.test_rmse());
}

std::string WatchLine(const tagi::v1::Job& job) {
  const auto& p = job.progress();
  std::string line = absl::StrCat(job.id(), "  ", StateName(job.state()));
  if (job.state() == tagi::v1::PENDING || p.total_steps() == 0) {
    return absl::StrCat(line, "  ", job.reason());
  }
  const std::string label = absl::StrFormat("  epoch %d/%d", p.epoch() + 1, job.spec().epochs());
  absl::StrAppend(&line, RenderProgressBar(label, p.global_step(), p.total_steps(),
                                           p.samples_per_second(),
                                           absl::Seconds(p.eta_seconds()), 24));
  const std::string metric = LatestMetric(job);
  if (!metric.empty()) absl::StrAppend(&line, "  ", metric);
  return line;
}

std::string JobTable(const std::vector<tagi::v1::Job>& jobs) {
  std::string out = absl::StrFormat("%-10s %-16s %-10s %5s %8s  %-22s %s\n", "ID", "NAME", "STATE",
                                    "WORLD", "PROGRESS", "METRIC", "REASON");
  for (const auto& j : jobs) {
    absl::StrAppendFormat(&out, "%-10s %-16s %-10s %5d %8s  %-22s %s\n", j.id(),
                          j.spec().name().empty() ? "-" : j.spec().name(), StateName(j.state()),
                          j.world_size(), ProgressText(j), LatestMetric(j), j.reason());
  }
  return out;
}

std::string JobDetails(const tagi::v1::Job& j) {
  const auto& p = j.progress();
  std::string out = absl::StrFormat(
      "job        %s (%s)\nstate      %s: %s\nworld      %d  generation %d  workers %s\n"
      "submitted  %s  started %s  ended %s\n",
      j.id(), j.spec().name().empty() ? "unnamed" : j.spec().name(), StateName(j.state()),
      j.reason(), j.world_size(), j.generation(),
      j.workers().empty() ? "-" : absl::StrJoin(j.workers(), ","), Time(j.submit_time_ms()),
      Time(j.start_time_ms()), Time(j.end_time_ms()));
  if (p.total_steps() > 0) {
    absl::StrAppendFormat(&out,
                          "progress   step %d/%d  %s samples/s  step %.2f ms  all-reduce %.2f ms "
                          "(%d bytes)\n",
                          p.global_step(), p.total_steps(), HumanCount(p.samples_per_second()),
                          1e3 * p.step_seconds(), 1e3 * p.allreduce_seconds(),
                          p.allreduce_bytes());
  }
  const bool classification = j.spec().head().has_classification();
  for (const auto& e : p.epochs()) {
    const std::string metric =
        classification ? absl::StrFormat("train acc %.2f%%  test acc %.2f%%",
                                         100 * e.train_accuracy(), 100 * e.test_accuracy())
                       : absl::StrFormat("test RMSE %.4f", e.test_rmse());
    absl::StrAppendFormat(&out, "epoch %-4d %s  test log-lik %.4f  sigma_v %g  %.2f s\n",
                          e.epoch(), metric, e.test_log_likelihood(), e.sigma_v(), e.seconds());
  }
  if (j.snapshot_time_ms() > 0) {
    absl::StrAppendFormat(&out, "snapshot   step %d, %d bytes, stored %s\n", j.snapshot_step(),
                          j.snapshot_bytes(), Time(j.snapshot_time_ms()));
  }
  for (const auto& r : j.recoveries()) {
    absl::StrAppendFormat(&out, "recovery   generation %d failed at step %d: %s\n",
                          r.failed_generation(), r.failed_at_step(), r.reason());
    if (r.new_generation() > 0) {
      absl::StrAppendFormat(&out, "           generation %d resumed at step %d (%s)",
                            r.new_generation(), r.resumed_from_step(), r.snapshot());
      if (r.first_step_ms() > 0) {
        absl::StrAppendFormat(&out, "; first step %d ms after detection, %d steps redone",
                              r.first_step_ms() - r.detected_ms(), r.steps_redone());
      }
      out += "\n";
    }
  }
  if (!j.model_checksum().empty()) {
    absl::StrAppendFormat(&out, "model      %d bytes, parameter checksum %s\n", j.model_bytes(),
                          j.model_checksum());
  }
  return out;
}

std::string WorkerTable(const std::vector<tagi::v1::WorkerInfo>& workers) {
  std::string out = absl::StrFormat("%-8s %-6s %-10s %-6s %-8s %-22s %s\n", "ID", "STATE", "JOB",
                                    "RANK", "DEVICE", "ADDRESS", "HOST");
  for (const auto& w : workers) {
    absl::StrAppendFormat(&out, "%-8s %-6s %-10s %-6s %-8s %-22s %s\n", w.id(), w.state(),
                          w.job_id().empty() ? "-" : w.job_id(),
                          w.job_id().empty() ? "-" : absl::StrCat(w.rank()),
                          w.device().empty() ? "cpu" : w.device(), w.address(), w.hostname());
  }
  return out;
}

}  // namespace tagi
