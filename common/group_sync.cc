#include "common/group_sync.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace tagi {

absl::StatusOr<std::string> PublishAndReadRankZero(Store& store, const std::string& prefix,
                                                   int rank, const std::string& value,
                                                   absl::Duration timeout) {
  if (auto st = store.Set(absl::StrCat(prefix, "/", rank), value); !st.ok()) return st;
  if (rank == 0) return value;
  return store.Get(absl::StrCat(prefix, "/0"), timeout);
}

absl::Status StoreBarrier(Store& store, const std::string& prefix, int rank, int world,
                          absl::Duration timeout) {
  const std::string release = absl::StrCat(prefix, "/all");
  if (rank != 0) {
    if (auto st = store.Set(absl::StrCat(prefix, "/", rank), "1"); !st.ok()) return st;
    return store.Wait({release}, timeout);
  }
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(world));
  for (int r = 1; r < world; ++r) keys.push_back(absl::StrCat(prefix, "/", r));
  if (auto st = store.Wait(keys, timeout); !st.ok()) return st;
  return store.Set(release, "1");
}

}  // namespace tagi
