// The disk half of Coordinator: job records, final models and snapshots
// queued for the StateWriter, what users see of a job whose final state is
// not saved yet, the state dir's health, and the retention of ended jobs.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/coordinator.h"

namespace tagi::coordinator {
namespace {

namespace fs = std::filesystem;
using tagi::v1::Job;

void Log(const std::string& line) { std::fprintf(stderr, "tagi-coordinator: %s\n", line.c_str()); }

}  // namespace

absl::Status Coordinator::StateHealth() {
  // The probe first: it names the condition (read-only, full) where a
  // failed write names only its errno.
  if (!options_.state_dir.empty()) {
    if (auto st = CheckDirWritable(options_.state_dir); !st.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the state dir cannot be written: ", st.message()));
    }
  }
  return writer_->Health();
}

void Coordinator::FlushState() { writer_->Flush(); }

bool Coordinator::FinalSavedLocked(const JobRecord& r) const {
  return options_.state_dir.empty() || r.end_version == 0 || r.saved_version >= r.end_version;
}

Job Coordinator::ViewLocked(const JobRecord& r) {
  if (!IsTerminal(r.job.state()) || FinalSavedLocked(r)) return r.job;
  Job view = r.job;
  // It ran (a generation was formed) or it was still queued.
  view.set_state(r.job.generation() > 0 && r.job.start_time_ms() > 0 ? tagi::v1::RUNNING
                                                                     : tagi::v1::PENDING);
  const absl::Status disk = writer_->Health();
  view.set_reason(absl::StrFormat(
      "ending as %s (%s); it is reported %s once that is saved in the state dir%s",
      JobStateName(r.job.state()), r.job.reason(), JobStateName(r.job.state()),
      disk.ok() ? "" : absl::StrCat(", which fails: ", disk.message())));
  view.clear_end_time_ms();
  return view;
}

void Coordinator::AwaitSavedLocked(const std::string& id) {
  if (options_.state_dir.empty()) return;
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  const uint64_t version = it->second.version;
  // Also ends when a job write fails: the caller then answers with the job
  // as it stands (a final state shown as not final yet).
  const uint64_t failed_before = saved_failed_;
  auto done = [this, &id, version, failed_before]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto j = jobs_.find(id);
    return j == jobs_.end() || j->second.saved_version >= version ||
           saved_failed_ != failed_before;
  };
  clock_.AwaitWithTimeout(mu_, absl::Condition(&done), options_.save_wait);
}

void Coordinator::PersistLocked(const JobRecord& r) {
  if (options_.state_dir.empty()) return;
  const std::string id = r.job.id();
  const uint64_t version = r.version;
  auto bytes = std::make_shared<const std::string>(r.job.SerializeAsString());
  const std::string path = (fs::path(options_.state_dir) / "jobs" / (id + ".job")).string();
  writer_->Queue({.group = id,
                  .key = "job",
                  .kind = "job",
                  .op = [this, path, bytes] { return fs_.WriteFileAtomic(path, *bytes); },
                  .done = [this, id, version](const absl::Status& st) {
                    OnJobSaved(id, version, st);
                  }});
}

void Coordinator::OnJobSaved(const std::string& id, uint64_t version, const absl::Status& st) {
  Lock lock(this);
  if (!st.ok()) {
    ++saved_failed_;
    Log(absl::StrFormat("cannot save job %s (will retry): %s", id, st.message()));
    return;
  }
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  JobRecord& r = it->second;
  const bool was_final = FinalSavedLocked(r);
  r.saved_version = std::max(r.saved_version, version);
  if (!was_final && FinalSavedLocked(r)) {
    Changed(r);  // watchers see the final state now
    Log(absl::StrFormat("job %s %s (saved)", id, JobStateName(r.job.state())));
  }
}

void Coordinator::PersistWorkerCounterLocked() {
  if (options_.state_dir.empty()) return;
  const std::string path = (fs::path(options_.state_dir) / "next-worker").string();
  const std::string text = absl::StrCat(next_worker_, "\n");
  writer_->Queue({.group = "",
                  .key = "next-worker",
                  .kind = "counter",
                  .op = [this, path, text] { return fs_.WriteFileAtomic(path, text); },
                  .done = [path](const absl::Status& st) {
                    if (!st.ok()) Log(absl::StrFormat("cannot save %s: %s", path, st.message()));
                  }});
}

void Coordinator::QueueSnapshotWriteLocked(const JobRecord& r, uint64_t step,
                                           std::shared_ptr<const std::string> bytes) {
  const std::string job = r.job.id();
  // The job's record as it is now goes first, in the same write: it holds
  // the metrics of every epoch the snapshot finished, so a restart never
  // resumes past metrics it does not have, whatever else the queue reorders.
  std::shared_ptr<const std::string> record;
  std::string record_path;
  const uint64_t version = r.version;
  if (!options_.state_dir.empty()) {
    record = std::make_shared<const std::string>(r.job.SerializeAsString());
    record_path = (fs::path(options_.state_dir) / "jobs" / (job + ".job")).string();
  }
  writer_->Queue(
      {.group = job,
       .key = "snapshot",  // a newer snapshot replaces one still waiting
       .kind = "snapshot",
       .op = [this, job, step, bytes, record, record_path]() -> absl::Status {
         if (record != nullptr) {
           if (auto st = fs_.WriteFileAtomic(record_path, *record); !st.ok()) return st;
         }
         return snapshots_->PutChecked(job, step, *bytes);
       },
       .done = [this, job, step, version, record](const absl::Status& st) {
         if (st.ok() && record != nullptr) OnJobSaved(job, version, st);
         Lock lock(this);
         if (st.ok()) {
           ++snapshots_stored_;
           return;
         }
         ++snapshots_rejected_;
         Log(absl::StrFormat("job %s: snapshot at step %d not written (will retry): %s", job,
                             step, st.message()));
       }});
}

void Coordinator::QueueModelWriteLocked(JobRecord& r) {
  if (options_.state_dir.empty()) return;
  const std::string id = r.job.id();
  const std::string path = (fs::path(options_.state_dir) / "models" / (id + ".tagi")).string();
  std::shared_ptr<const std::string> bytes = r.model_data;
  writer_->Queue({.group = id,
                  .key = "model",
                  .kind = "model",
                  .op = [this, path, bytes] { return fs_.WriteFileAtomic(path, *bytes); },
                  .done = [this, id, path, bytes](const absl::Status& st) {
                    Lock lock(this);
                    if (!st.ok()) {
                      Log(absl::StrFormat("cannot save the model of job %s (kept in memory; "
                                          "will retry): %s",
                                          id, st.message()));
                      return;
                    }
                    auto it = jobs_.find(id);
                    if (it == jobs_.end() || it->second.model_data != bytes) return;
                    it->second.model_path = path;
                    it->second.model_data.reset();
                  }});
}

void Coordinator::PersistLogsLocked() {
  const absl::Time now = clock_.Now();
  for (auto& [id, r] : jobs_) {
    if (!r.log_dirty || now - r.log_written < kLogWriteInterval) continue;
    r.log_dirty = false;
    r.log_written = now;
    if (options_.state_dir.empty()) continue;
    auto bytes = std::make_shared<const std::string>(r.log.Encode());
    const std::string path = (fs::path(options_.state_dir) / "logs" / (id + ".logs")).string();
    const std::string job = id;
    writer_->Queue({.group = id,
                    .key = "logs",  // a newer one replaces one still waiting
                    .kind = "logs",
                    .op = [this, path, bytes] { return fs_.WriteFileAtomic(path, *bytes); },
                    .done = [job](const absl::Status& st) {
                      if (!st.ok()) {
                        Log(absl::StrFormat("cannot save the log of job %s (will retry): %s", job,
                                            st.message()));
                      }
                    }});
  }
}

void Coordinator::PruneEndedLocked() {
  std::vector<EndedJob> ended;
  for (const auto& [id, r] : jobs_) {
    if (IsTerminal(r.job.state()) && FinalSavedLocked(r)) {
      ended.push_back({id, r.ended_at, r.seq});
    }
  }
  // Ages on the monotonic clock (from the end, or from the load for a job
  // that ended before this process): a wall-clock jump deletes nothing.
  const absl::Time now = clock_.Now();
  if (ended.size() <= options_.retention.max_ended_jobs && !ended.empty()) {
    const auto oldest = std::min_element(ended.begin(), ended.end(), [](auto& a, auto& b) {
      return a.ended < b.ended;
    });
    if (now - oldest->ended <= options_.retention.max_ended_age) return;
  }
  for (const Pruning& p : DecideRetention(now, std::move(ended), options_.retention)) {
    Log(absl::StrFormat("forgetting job %s: %s", p.id, p.reason));
    jobs_.erase(p.id);
    ++jobs_pruned_;
    ++epoch_;
    RemoveJobFilesLocked(p.id);
  }
}

void Coordinator::RemoveJobFilesLocked(const std::string& id) {
  const fs::path root(options_.state_dir);
  const std::string snapshots = (fs::path(snapshot_dir_) / id).string();
  const std::string counter = absl::StrCat(next_job_, "\n");
  const bool state = !options_.state_dir.empty();
  writer_->Queue({.group = id,
                  .key = "remove",
                  .kind = "remove",
                  .op = [this, root, id, snapshots, counter, state]() -> absl::Status {
                    if (state) {
                      // First the counter: a restart must not hand this id out again.
                      if (auto st = fs_.WriteFileAtomic((root / "next-job").string(), counter);
                          !st.ok()) {
                        return st;
                      }
                      for (const fs::path& p : {root / "jobs" / (id + ".job"),
                                                root / "models" / (id + ".tagi"),
                                                root / "logs" / (id + ".logs")}) {
                        if (auto st = fs_.RemoveAll(p.string()); !st.ok()) return st;
                      }
                    }
                    return fs_.RemoveAll(snapshots);
                  },
                  .done = [id](const absl::Status& st) {
                    if (!st.ok()) {
                      Log(absl::StrFormat("cannot remove the files of job %s (will retry): %s",
                                          id, st.message()));
                    }
                  }});
}

void Coordinator::RemoveOrphanFilesLocked() {
  const fs::path root(options_.state_dir);
  std::error_code ec;
  // Files of a record that exists but did not load (corrupt) are kept.
  std::set<std::string> records;
  for (fs::directory_iterator it(root / "jobs", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    records.insert(it->path().stem().string());
  }
  ec.clear();
  auto orphan = [&](const std::string& id) { return !jobs_.contains(id) && !records.contains(id); };
  std::vector<std::string> orphans;
  for (fs::directory_iterator it(root / "models", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const fs::path p = it->path();
    if (p.extension() == ".tagi" && orphan(p.stem().string())) {
      orphans.push_back(p.stem().string());
    }
  }
  ec.clear();
  for (fs::directory_iterator it(snapshot_dir_, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_directory(ec) && ValidateSnapshotJobId(name).ok() && orphan(name)) {
      orphans.push_back(name);
    }
  }
  std::sort(orphans.begin(), orphans.end());
  orphans.erase(std::unique(orphans.begin(), orphans.end()), orphans.end());
  for (const std::string& id : orphans) {
    startup_log_.push_back(absl::StrFormat("removing the files of job %s, which the state dir "
                                           "no longer holds",
                                           id));
    Log(startup_log_.back());
    RemoveJobFilesLocked(id);
  }
}

}  // namespace tagi::coordinator
