// OverlappedReduce: one data-parallel step's all-reduce cut into buckets
// (spec/buckets.h) that a communication thread reduces while the backward
// pass is still running.
//
// The trainer calls BeginStep before the engine's TrainStep; the engine's
// backward calls Ready(ready_from, device_event) as its deltas become
// final, which releases the buckets wholly above ready_from to the thread
// (in launch order: the last layers first). A GPU engine's deltas are final
// only once its stream reaches device_event: the bucket's all-reduce then
// waits for that event on the device (Collective::AllReduceSumAfter, NCCL),
// so the collective's stream and the engine's run side by side; after TrainStep and BeginReduce (which stages the state
// and the control word behind the deltas) the trainer calls Finish, which
// releases the rest (the last bucket and that tail) and waits for all.
// Each bucket is two all-reduce calls (its mu range, its var range, in the
// job's wire precision), the tail a third (FP32), on the thread, in bucket
// order: every rank makes the same
// calls in the same order with the same sizes, so the group stays in step
// and the sums are the same on every replica and run to run.
//
// Failures: the first failed call ends the step's reduction; Finish returns
// its status (Aborted, DeadlineExceeded, ...), exactly what the single
// all-reduce would have returned. Finish waits at most as long as the calls
// left could take (each has the collective timeout) plus a margin, then
// aborts the collective. Abandon (a step that failed before Finish) aborts
// the collective and waits for the thread to stop.
//
// No allocation and no thread creation per step: the thread lives as long
// as the object. BeginStep, StepDone, Finish and Abandon are called from
// the thread that drives the engine.
#ifndef TAGI_WORKER_OVERLAP_H_
#define TAGI_WORKER_OVERLAP_H_

#include <cstddef>
#include <span>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "spec/buckets.h"
#include "worker/collective/collective.h"

namespace tagi {

class OverlappedReduce {
 public:
  // `buffer`: [mu half][var half][tail], the var half at `var_offset` (N,
  // or N padded by a GPU engine) and the tail at 2 var_offset; the buckets
  // cut [0, N) of each half (spec::PlanBuckets). REQUIRES: at least one
  // bucket; collective, clock and buffer outlive the object.
  OverlappedReduce(Collective& collective, absl::Duration timeout, Clock& clock,
                   std::span<float> buffer, size_t var_offset,
                   std::vector<spec::Bucket> buckets, WirePrecision wire = WirePrecision::kFp32);
  ~OverlappedReduce();
  OverlappedReduce(const OverlappedReduce&) = delete;
  OverlappedReduce& operator=(const OverlappedReduce&) = delete;

  size_t num_buckets() const { return buckets_.size(); }

  void BeginStep();
  void Ready(size_t ready_from, void* device_event = nullptr);
  absl::Status Finish();
  void Abandon();

  // Of the last Finish: the seconds the thread spent in the collective, and
  // the seconds Finish waited (the all-reduce time the backward did not
  // hide).
  double busy_seconds() const { return busy_seconds_; }
  double wait_seconds() const { return wait_seconds_; }

 private:
  void Run();
  absl::Status ReduceUnit(size_t unit);
  void Release(size_t units, void* device_event);
  bool Settled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Collective& collective_;
  const absl::Duration timeout_;
  Clock& clock_;
  const std::span<float> buffer_;
  const size_t n_;
  const std::vector<spec::Bucket> buckets_;
  const size_t units_;  // the buckets and the tail
  const WirePrecision wire_;  // of the deltas; the tail always goes in FP32
  size_t released_here_ = 0;  // the driving thread's copy of released_
  // Per unit, the device event it waits for (null: none), written before
  // its release is published under mu_.
  std::vector<void*> unit_event_;
  double busy_seconds_ = 0.0;
  double wait_seconds_ = 0.0;

  mutable absl::Mutex mu_;
  size_t released_ ABSL_GUARDED_BY(mu_) = 0;
  size_t done_ ABSL_GUARDED_BY(mu_) = 0;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // the thread is in a collective call
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  double busy_accumulated_ ABSL_GUARDED_BY(mu_) = 0.0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tagi

#endif  // TAGI_WORKER_OVERLAP_H_
