// InProcessGroup: a Collective whose N ranks are threads of one process.
//
// The in-process fake: tests of the trainer and the worker run a whole
// data-parallel group in one process with it, and it is the numerical
// reference of the real backends. Semantics:
//  - AllReduceSum adds the ranks' buffers in a fixed order, in float:
//    ((rank 0 + rank 1) + rank 2) + ..., so the result is deterministic
//    and bit-identical on every rank.
//  - Every call is a rendezvous of all ranks: it returns once every rank
//    has made the same call (same kind, size and root), or with an error.
//  - A rank that waits longer than its timeout fails the group with
//    DeadlineExceeded; every rank waiting in the same call then returns
//    DeadlineExceeded too.
//  - Abort() on any member, the destruction of a member, a timeout, or
//    mismatched calls (kind, size or root; InvalidArgument for the rank
//    that sees it) poison the group: every pending and later call of every
//    member returns Aborted at once. A poisoned group stays dead; build a
//    new InProcessGroup for the next generation.
//
// Ownership and threads: members share the group's state (they may
// outlive the InProcessGroup object). Each member is driven by one thread;
// Abort() may be called from any thread. The group object itself is
// thread-safe.
#ifndef TAGI_WORKER_COLLECTIVE_IN_PROCESS_H_
#define TAGI_WORKER_COLLECTIVE_IN_PROCESS_H_

#include <memory>

#include "absl/time/time.h"
#include "worker/collective/collective.h"

namespace tagi {

namespace in_process_internal {
class GroupState;
}  // namespace in_process_internal

class InProcessGroup {
 public:
  // REQUIRES: world >= 1 (checked).
  explicit InProcessGroup(int world);
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int world() const;

  // The member of `rank`. REQUIRES: 0 <= rank < world, and each rank is
  // asked for at most once (both checked).
  std::unique_ptr<Collective> Member(int rank);

  // For tests: waits until `count` ranks are blocked in the current call
  // (arrived and waiting for the others). Returns false when that does not
  // happen within `timeout` or the group is poisoned.
  bool AwaitArrivals(int count, absl::Duration timeout);

 private:
  std::shared_ptr<in_process_internal::GroupState> state_;
};

}  // namespace tagi

#endif  // TAGI_WORKER_COLLECTIVE_IN_PROCESS_H_
