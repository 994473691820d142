#include "worker/collective/tcp/wire.h"

#include "absl/strings/str_format.h"

namespace tagi::ring_internal {

bool Hello::Matches(const Bytes& b, const Hello& expected, std::string* why) {
  if (GetU64(&b[0]) != kMagic) {
    *why = "not a ring hello (bad magic)";
    return false;
  }
  const uint32_t role = GetU32(&b[8]);
  const uint32_t rank = GetU32(&b[12]);
  const uint32_t world = GetU32(&b[16]);
  const uint64_t group = GetU64(&b[24]);
  if (role != expected.role || rank != expected.rank || world != expected.world ||
      group != expected.group) {
    *why = absl::StrFormat(
        "hello from role %u rank %u of %u in group %016x; expected role %u rank %u of %u in "
        "group %016x",
        role, rank, world, group, expected.role, expected.rank, expected.world, expected.group);
    return false;
  }
  return true;
}

bool CallHeader::Matches(const Bytes& b, const CallHeader& expected, std::string* why) {
  if (GetU32(&b[0]) != kMagic) {
    *why = "stream out of step (bad call magic)";
    return false;
  }
  const uint32_t op = GetU32(&b[4]);
  const uint64_t seq = GetU64(&b[8]);
  const uint64_t count = GetU64(&b[16]);
  const uint32_t root = GetU32(&b[24]);
  const uint32_t wire = GetU32(&b[28]);
  if (op != expected.op || seq != expected.seq || count != expected.count ||
      root != expected.root || wire != expected.wire) {
    *why = absl::StrFormat(
        "predecessor made call #%u (op %u, %u elements, root %u, wire format %u); this rank "
        "made call #%u (op %u, %u elements, root %u, wire format %u)",
        seq, op, count, root, wire, expected.seq, expected.op, expected.count, expected.root,
        expected.wire);
    return false;
  }
  return true;
}

}  // namespace tagi::ring_internal
