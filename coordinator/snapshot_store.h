// SnapshotStore: the coordinator's on-disk store of each job's snapshots.
//
// Layout: <dir>/<job_id>/snapshot-<global_step, 12+ digits>.tagisnap, each
// file written atomically (common/file_util.h: temp file, fsync, rename,
// fsync dir), so a crash leaves the old file set or the new one. Put refuses
// bytes that do not decode (common/snapshot.h), then keeps only the newest
// keep_last snapshots of that job (newest = highest global step; a Put of a
// step older than the kept ones is written and pruned at once). Latest
// returns the newest snapshot that decodes and belongs to the job, and
// names every newer file it skipped with the reason, for the log.
//
// Which file to resume from is decided by ChooseSnapshot, a pure function
// over (file name, decode result) pairs; the store only lists, reads and
// calls it. Job ids are restricted to [A-Za-z0-9._-] (not starting with a
// dot), so no id can name a path outside dir.
//
// Thread-safe: one mutex serialises the store's disk operations. One
// process owns dir; other writers of the same directory are not fenced.
#ifndef TAGI_COORDINATOR_SNAPSHOT_STORE_H_
#define TAGI_COORDINATOR_SNAPSHOT_STORE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/file_util.h"
#include "common/snapshot.h"
#include "tagi/v1/job.pb.h"

namespace tagi {

inline constexpr size_t kMaxJobIdBytes = 128;

// OK for a non-empty id of at most kMaxJobIdBytes characters from
// [A-Za-z0-9._-] not starting with '.'; otherwise InvalidArgument saying why.
absl::Status ValidateSnapshotJobId(std::string_view job_id);

// "snapshot-000000000042.tagisnap" for 42.
std::string SnapshotFileName(uint64_t global_step);
// The global step a snapshot file name encodes; nullopt for any other name
// (temporary files of an unfinished atomic write among them).
std::optional<uint64_t> ParseSnapshotFileName(std::string_view name);

// One file of a job's directory and what decoding it gave.
struct SnapshotCandidate {
  std::string name;
  absl::StatusOr<Snapshot> decoded;
};

struct SnapshotChoice {
  size_t index = 0;  // into the candidates
  // "<name>: <reason>" for every candidate newer than the chosen one that
  // was rejected, newest first.
  std::vector<std::string> skipped;
};

// Why a candidate cannot be resumed from: its decode error, a name that is
// not a snapshot file name, another job's snapshot, or a global step that
// disagrees with its name. OK when it can.
absl::Status CheckSnapshotCandidate(std::string_view job_id, const SnapshotCandidate& candidate);

// Picks the candidate with the highest global step (from its name) that
// passes CheckSnapshotCandidate. Candidates may come in any order.
// NotFound (listing every rejection) when none passes.
absl::StatusOr<SnapshotChoice> ChooseSnapshot(std::string_view job_id,
                                              std::span<const SnapshotCandidate> candidates);

// The decoded snapshot when `bytes` are an intact snapshot (CRC, format) of
// job_id at global_step: what Put checks before writing. InvalidArgument for
// a bad job id or another job / step; DataLoss or FailedPrecondition (an
// unknown format version) for bytes that do not decode.
// OK when the snapshot's parameters fit a job of `spec` (its network's
// number) and every value is one a training could hold (a finite mean, a
// finite positive variance, finite state); InvalidArgument otherwise.
absl::Status CheckSnapshotValues(const tagi::v1::JobSpec& spec, const Snapshot& snapshot);

absl::StatusOr<Snapshot> CheckSnapshotUpload(const std::string& job_id, uint64_t global_step,
                                              std::span<const char> bytes);

struct LatestSnapshot {
  std::string path;
  Snapshot snapshot;
  std::vector<std::string> skipped;  // as SnapshotChoice::skipped
};

class SnapshotStore {
 public:
  // REQUIRES: keep_last >= 1. dir is created on the first Put. Files are
  // written through `fs` (null: the host's), which must outlive the store.
  SnapshotStore(std::string dir, size_t keep_last, FileSystem* fs = nullptr);

  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  // InvalidArgument: bad job id, or bytes whose job id / global step differ
  // from the arguments. DataLoss (or FailedPrecondition for an unknown
  // format version): bytes that do not decode; nothing is written.
  // Internal / PermissionDenied: the disk failed.
  absl::Status Put(const std::string& job_id, uint64_t global_step, const std::string& bytes);
  // Put without the check, for bytes that already passed CheckSnapshotUpload
  // (the coordinator checks on receipt and writes later).
  absl::Status PutChecked(const std::string& job_id, uint64_t global_step,
                          const std::string& bytes);

  // InvalidArgument: bad job id. NotFound: no snapshot of the job decodes
  // (the message lists the skipped files).
  absl::StatusOr<LatestSnapshot> Latest(const std::string& job_id);

  // The job's snapshot file names, oldest first (for tests and listing).
  absl::StatusOr<std::vector<std::string>> List(const std::string& job_id);

 private:
  std::string JobDir(const std::string& job_id) const;
  absl::StatusOr<std::vector<std::string>> ListLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PruneLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const size_t keep_last_;
  RealFileSystem real_fs_;
  FileSystem& fs_;
  absl::Mutex mu_;  // serialises disk operations; guards no fields
};

}  // namespace tagi

#endif  // TAGI_COORDINATOR_SNAPSHOT_STORE_H_
