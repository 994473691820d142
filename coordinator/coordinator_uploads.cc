// Coordinator::AdmitUpload: the check an upload passes before its bytes are
// read (services.cc calls it after the stream's first message).
#include "absl/strings/str_format.h"
#include "coordinator/coordinator.h"

namespace tagi::coordinator {

absl::Status Coordinator::AdmitUpload(const std::string& worker_id, const std::string& job,
                                      uint64_t gen, UploadKind kind, uint64_t bytes,
                                      uint64_t global_step) {
  const bool snapshot = kind == UploadKind::kSnapshot;
  const char* what = snapshot ? "snapshot" : "model";
  const size_t limit = snapshot ? options_.max_snapshot_bytes : options_.max_model_bytes;
  if (bytes > limit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s of %d bytes exceeds the limit of %d", what, bytes, limit));
  }
  Lock lock(this);
  auto r = RunningJobLocked(job, gen);
  if (!r.ok()) {
    auto f = FencedJob(job, gen);
    if (!snapshot || !f.ok() || !EndedGenerationSnapshotLocked(**f, gen, worker_id, global_step)) {
      return r.status();
    }
    r = f;
  }
  if ((*r)->job.workers_size() == 0 || (*r)->job.workers(0) != worker_id) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "only rank 0 of job %s generation %d uploads the %s", job, gen, what));
  }
  return absl::OkStatus();
}

}  // namespace tagi::coordinator
