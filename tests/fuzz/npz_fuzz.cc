// Fuzzes the NPZ reader (ReadNpzMembers): the zip directory and members of
// a NUMPY job's archive, read by libzip from memory.
//
// Besides the sanitizers, it checks that a refusal is InvalidArgument with a
// message and that every member returned is within the cap; the members
// found are then parsed as NPY (ParseNpy) like the loader does.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_support.h"
#include "worker/data/npy.h"
#include "worker/data/npz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint64_t kCap = 1 << 16;
  auto members = tagi::data::ReadNpzMembers({data, size}, "f.npz",
                                            {"x_train", "y_train", "x_test", "y_test"}, kCap);
  if (!members.ok()) {
    FUZZ_CHECK(members.status().code() == absl::StatusCode::kInvalidArgument &&
                   !members.status().message().empty(),
               "refused with %s", members.status().ToString().c_str());
    return 0;
  }
  for (const auto& [name, bytes] : *members) {
    FUZZ_CHECK(bytes.size() <= kCap, "member %s of %zu bytes", name.c_str(), bytes.size());
    auto a = tagi::data::ParseNpy(bytes, name, kCap);
    FUZZ_CHECK(a.ok() || a.status().code() == absl::StatusCode::kInvalidArgument, "%s",
               a.status().ToString().c_str());
  }
  return 0;
}
