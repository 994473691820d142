#include "worker/job_rules.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_spec.h"
#include "worker/collective/collective.h"

namespace tagi {

tagi::v1::JobSpec::Backend ChooseBackend(const tagi::v1::JobSpec& spec, int device) {
  if (spec.backend() != tagi::v1::JobSpec::BACKEND_UNSPECIFIED) return spec.backend();
  return device >= 0 ? tagi::v1::JobSpec::NCCL : tagi::v1::JobSpec::TCP_RING;
}

absl::StatusOr<int> EngineDevice(const tagi::v1::JobSpec& spec, int worker_device) {
  absl::StatusOr<int> wanted = ParseDevice(spec.device());
  if (!wanted.ok()) return wanted.status();
  if (*wanted < 0) return -1;
  if (worker_device < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the job asks for device ", spec.device(),
        " but this worker runs the CPU engine (start it with --device cuda:N)"));
  }
  return worker_device;
}

bool NeedsGroup(const tagi::v1::Assignment& a) {
  return a.world_size() > 1 || a.spec().backend() == tagi::v1::JobSpec::NCCL;
}

std::string CheckResumeCursor(const Snapshot& s, const tagi::v1::Assignment& a,
                              uint64_t steps_per_epoch, uint64_t global_batch,
                              size_t num_samples) {
  const tagi::v1::JobSpec& spec = a.spec();
  if (s.epoch > spec.epochs() || (s.epoch == spec.epochs() && s.offset != 0)) {
    return absl::StrFormat("epoch %d offset %d is past the job's %d epochs", s.epoch, s.offset,
                           spec.epochs());
  }
  if (!IsElastic(spec)) {
    if (s.world != a.world_size()) {
      return absl::StrFormat("it was taken at world %d; this job's world is fixed at %d", s.world,
                             a.world_size());
    }
    if (s.step >= steps_per_epoch || s.offset != s.step * global_batch ||
        s.global_step != s.epoch * steps_per_epoch + s.step) {
      return absl::StrFormat("epoch %d step %d (global %d) is not a step of this job", s.epoch,
                             s.step, s.global_step);
    }
    return "";
  }
  if (s.offset >= num_samples && !(s.offset == 0 && s.step == 0)) {
    return absl::StrFormat("offset %d is past the epoch's %d samples", s.offset, num_samples);
  }
  return "";
}

JobOutcome ClassifyAttemptEnd(const AttemptEnd& end) {
  JobOutcome out;
  const absl::Status& st = end.status;
  if (st.ok()) {
    out.ok = true;
  } else if (absl::IsCancelled(st) && (end.told_to_stop || end.shutting_down || !end.aborted)) {
    out.cancelled = true;
    // The group agreed to stop: this rank was told to cancel, or is
    // shutting down (the job goes on without it), or neither: then a peer
    // voted, for either reason, and the coordinator knows which (a
    // cancelled job stays cancelled; a peer's shutdown ends the generation).
    out.retryable = end.shutting_down || !end.told_to_stop;
    out.reason = end.shutting_down ? "the worker is shutting down (signal)"
                 : end.told_to_stop ? "cancelled"
                                    : "a peer rank stopped the group (shutting down or cancelled)";
  } else if (end.aborted) {
    out.retryable = true;
    out.reason = absl::StrCat("aborted: ", end.abort_reason, " (", st.message(), ")");
  } else {
    // After the group formed, a failure is the group's (a peer died, the
    // coordinator went away); before, only a broken connection is.
    out.retryable = end.in_group || absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) ||
                    absl::IsAborted(st);
    // The job's own words: its file's field names (data.trainImages, ...).
    out.reason = JobFileFieldNames(st.message());
    if (out.retryable && end.in_group) {
      const std::optional<int> peer = PeerRankOf(st);
      if (peer.has_value() && *peer != end.rank) out.suspect_rank = peer;
    }
  }
  return out;
}

RendezvousAction OnRendezvousFailure(const absl::Status& st) {
  if (absl::IsUnauthenticated(st)) return RendezvousAction::kNewIdentity;
  if (absl::IsNotFound(st)) return RendezvousAction::kRegisterAgain;
  if (absl::IsFailedPrecondition(st)) return RendezvousAction::kStop;
  return RendezvousAction::kBackOff;
}

bool RetryRegistration(const absl::Status& st) {
  return !absl::IsUnauthenticated(st) && !absl::IsFailedPrecondition(st);
}

}  // namespace tagi
