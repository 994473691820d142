// Group steps of a job's ranks through a Store, each O(world) key reads in
// all (the coordinator serves the store: its work must not grow with
// world^2, and every rank reading every other rank's key did).
//
// Keys are `prefix` + "/" + rank, and `prefix` + "/all" for the barrier's
// release. Thread-safe as the store is.
#ifndef TAGI_COMMON_GROUP_SYNC_H_
#define TAGI_COMMON_GROUP_SYNC_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/store.h"

namespace tagi {

// Publishes `value` for `rank` and returns rank 0's value (rank 0's own,
// at once, for rank 0): a rank that compares its value with rank 0's has
// compared it with every rank's once every rank has. DeadlineExceeded when
// rank 0's value does not show up within `timeout`.
absl::StatusOr<std::string> PublishAndReadRankZero(Store& store, const std::string& prefix,
                                                   int rank, const std::string& value,
                                                   absl::Duration timeout);

// Returns once every rank of `world` has called it (or its timeout ran
// out: DeadlineExceeded): rank 0 waits for every rank's key and then
// releases the others, who wait for that one key.
absl::Status StoreBarrier(Store& store, const std::string& prefix, int rank, int world,
                          absl::Duration timeout);

}  // namespace tagi

#endif  // TAGI_COMMON_GROUP_SYNC_H_
