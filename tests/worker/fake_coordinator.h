// An in-process CoordinatorApi for the unit tests of the agent and the job
// runner. It keeps what the worker sends (registrations, snapshots, models,
// FinishJob reports), serves scripted rendezvous answers and snapshots,
// holds one in-memory store per (job, generation) for the ranks' groups,
// and can be made unreachable (every call Unavailable) or have a
// generation ended (snapshot uploads Aborted) to play a lost or restarted
// coordinator. Waits are in real time and bounded. Thread-safe: the ranks
// of a world are threads that share one fake.
#ifndef TAGI_TESTS_WORKER_FAKE_COORDINATOR_H_
#define TAGI_TESTS_WORKER_FAKE_COORDINATOR_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/store.h"
#include "worker/coordinator_api.h"

namespace tagi::test {

class FakeCoordinator final : public CoordinatorApi {
 public:
  struct Upload {
    std::string job_id;
    uint64_t generation = 0;
    uint64_t global_step = 0;  // snapshots
    std::string checksum;      // models
    std::string bytes;
  };

  // ---- what the test sets ----
  // Every call fails Unavailable while set (the coordinator is away).
  void SetUnreachable(bool down) {
    absl::MutexLock lock(&mu_);
    unreachable_ = down;
  }
  // Snapshot uploads are answered Aborted(reason) from now on (the
  // coordinator restarted and ended the generation); the snapshot is kept.
  void EndGenerations(std::string reason) {
    absl::MutexLock lock(&mu_);
    ended_ = std::move(reason);
  }
  // The next `times` Register calls (every one: -1) answer this error.
  void RefuseRegistration(absl::Status st, int times = -1) {
    absl::MutexLock lock(&mu_);
    register_refusal_ = std::move(st);
    refusals_left_ = times;
  }
  // The next Rendezvous calls answer these, in order; then "not assigned"
  // after the poll's wait (bounded by kIdlePoll, real time).
  void QueueRendezvous(absl::StatusOr<tagi::v1::RendezvousResponse> r) {
    absl::MutexLock lock(&mu_);
    rendezvous_.push_back(std::move(r));
  }
  void QueueAssignment(const tagi::v1::Assignment& a) {
    tagi::v1::RendezvousResponse r;
    r.set_assigned(true);
    *r.mutable_assignment() = a;
    QueueRendezvous(std::move(r));
  }
  // What DownloadSnapshot serves for `job` (any generation).
  void ServeSnapshot(const std::string& job, std::string bytes) {
    absl::MutexLock lock(&mu_);
    served_[job] = std::move(bytes);
  }

  // ---- what the worker did ----
  std::vector<tagi::v1::RegisterRequest> registrations() {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  int credential_clears() {
    absl::MutexLock lock(&mu_);
    return clears_;
  }
  std::vector<Upload> snapshots() {
    absl::MutexLock lock(&mu_);
    return snapshots_;
  }
  // The stored snapshot of `job` at `global_step`, if any.
  std::optional<std::string> SnapshotAt(const std::string& job, uint64_t global_step) {
    absl::MutexLock lock(&mu_);
    for (auto it = snapshots_.rbegin(); it != snapshots_.rend(); ++it) {
      if (it->job_id == job && it->global_step == global_step) return it->bytes;
    }
    return std::nullopt;
  }
  int snapshot_attempts() {  // uploads tried, stored or not
    absl::MutexLock lock(&mu_);
    return snapshot_attempts_;
  }
  std::vector<Upload> models() {
    absl::MutexLock lock(&mu_);
    return models_;
  }
  std::vector<tagi::v1::FinishJobRequest> finished() {  // tried, reached or not
    absl::MutexLock lock(&mu_);
    return finished_;
  }
  int rendezvous_calls() {
    absl::MutexLock lock(&mu_);
    return rendezvous_calls_;
  }

  // ---- CoordinatorApi ----
  absl::StatusOr<tagi::v1::RegisterResponse> Register(
      const tagi::v1::RegisterRequest& req) override {
    absl::MutexLock lock(&mu_);
    registrations_.push_back(req);
    if (unreachable_) return Away();
    if (!register_refusal_.ok() && refusals_left_ != 0) {
      if (refusals_left_ > 0) --refusals_left_;
      return register_refusal_;
    }
    tagi::v1::RegisterResponse resp;
    // A re-registration with the credentials keeps its id.
    const bool keeps = !req.worker_id().empty() && req.worker_id() == credential_id_;
    resp.set_worker_id(keeps ? req.worker_id() : absl::StrCat("w", ++next_id_));
    resp.set_secret("secret");
    // The fake's session streams stay silent: a heartbeat long enough that
    // the session does not take the silence for a lost coordinator.
    resp.set_heartbeat_ms(2000);
    credential_id_ = resp.worker_id();
    return resp;
  }
  void ClearCredentials() override {
    absl::MutexLock lock(&mu_);
    ++clears_;
    credential_id_.clear();
  }
  absl::StatusOr<tagi::v1::RendezvousResponse> Rendezvous(const std::string& worker_id,
                                                          absl::Duration wait) override {
    absl::MutexLock lock(&mu_);
    ++rendezvous_calls_;
    if (unreachable_) return Away();
    (void)worker_id;
    auto queued = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !rendezvous_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&queued), std::min(wait, kIdlePoll));
    if (rendezvous_.empty()) return tagi::v1::RendezvousResponse();
    absl::StatusOr<tagi::v1::RendezvousResponse> r = std::move(rendezvous_.front());
    rendezvous_.pop_front();
    return r;
  }
  absl::Status UploadModel(const tagi::v1::UploadModelRequest& header,
                           const std::string& bytes) override {
    absl::MutexLock lock(&mu_);
    if (unreachable_) return Away();
    models_.push_back({header.job_id(), header.generation(), 0, header.checksum(), bytes});
    return absl::OkStatus();
  }
  absl::Status UploadSnapshot(const tagi::v1::SnapshotChunk& header,
                              const std::string& bytes) override {
    absl::MutexLock lock(&mu_);
    ++snapshot_attempts_;
    if (unreachable_) return Away();
    snapshots_.push_back({header.job_id(), header.generation(), header.global_step(), "", bytes});
    if (!ended_.empty()) return absl::AbortedError(ended_);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> DownloadSnapshot(const tagi::v1::DownloadSnapshotRequest& req,
                                               size_t max_bytes) override {
    absl::MutexLock lock(&mu_);
    if (unreachable_) return Away();
    auto it = served_.find(req.job_id());
    if (it == served_.end()) return absl::NotFoundError("fake: no snapshot for " + req.job_id());
    if (it->second.size() > max_bytes) return absl::DataLossError("fake: snapshot too long");
    return it->second;
  }
  absl::Status FinishJob(const tagi::v1::FinishJobRequest& req) override {
    absl::MutexLock lock(&mu_);
    finished_.push_back(req);
    return unreachable_ ? Away() : absl::OkStatus();
  }
  absl::Status StoreSet(const std::string& job, uint64_t gen, const std::string& key,
                        const std::string& value) override {
    Store* s = StoreOf(job, gen);
    return s == nullptr ? Away() : s->Set(key, value);
  }
  absl::StatusOr<std::string> StoreGet(const std::string& job, uint64_t gen,
                                       const std::string& key, absl::Duration wait) override {
    Store* s = StoreOf(job, gen);
    if (s == nullptr) return Away();
    return s->Get(key, wait);
  }
  absl::Status StoreWait(const std::string& job, uint64_t gen,
                         const std::vector<std::string>& keys, absl::Duration wait) override {
    Store* s = StoreOf(job, gen);
    return s == nullptr ? Away() : s->Wait(keys, wait);
  }
  absl::StatusOr<int64_t> StoreAdd(const std::string& job, uint64_t gen, const std::string& key,
                                   int64_t delta) override {
    Store* s = StoreOf(job, gen);
    if (s == nullptr) return Away();
    return s->Add(key, delta);
  }

  // The longest an idle Rendezvous waits (keeps agent tests quick).
  static constexpr absl::Duration kIdlePoll = absl::Milliseconds(20);

 private:
  static absl::Status Away() { return absl::UnavailableError("fake: the coordinator is away"); }

  // The store of one attempt; null while unreachable. Stores live as long
  // as the fake (a test runs a handful of attempts).
  Store* StoreOf(const std::string& job, uint64_t gen) {
    absl::MutexLock lock(&mu_);
    if (unreachable_) return nullptr;
    auto& s = stores_[{job, gen}];
    if (s == nullptr) s = std::make_unique<InMemoryStore>();
    return s.get();
  }

  absl::Mutex mu_;
  bool unreachable_ ABSL_GUARDED_BY(mu_) = false;
  std::string ended_ ABSL_GUARDED_BY(mu_);
  absl::Status register_refusal_ ABSL_GUARDED_BY(mu_);
  int refusals_left_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<absl::StatusOr<tagi::v1::RendezvousResponse>> rendezvous_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> served_ ABSL_GUARDED_BY(mu_);
  std::vector<tagi::v1::RegisterRequest> registrations_ ABSL_GUARDED_BY(mu_);
  std::string credential_id_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int clears_ ABSL_GUARDED_BY(mu_) = 0;
  int rendezvous_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int snapshot_attempts_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Upload> snapshots_ ABSL_GUARDED_BY(mu_);
  std::vector<Upload> models_ ABSL_GUARDED_BY(mu_);
  std::vector<tagi::v1::FinishJobRequest> finished_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, uint64_t>, std::unique_ptr<InMemoryStore>> stores_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tagi::test

#endif  // TAGI_TESTS_WORKER_FAKE_COORDINATOR_H_
