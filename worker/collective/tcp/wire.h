// Internal to the ring backend: the fixed-size messages of its wire
// protocol, little-endian whatever the host.
//
// Each connection carries, from the connecting rank (the predecessor) to
// the accepting rank (the successor):
//   Hello(kConnect), then per collective call one CallHeader followed by
//   that call's payload: floats (host float format; the ranks of a job run
//   the same build) or, for a 16-bit wire, 16-bit codes (wire_precision.h);
// and in the other direction only Hello(kAccept). Payload lengths are never
// read from the wire: both ends derive them from their own call, and the
// CallHeader lets the receiver check that its predecessor is making the
// same call (operation, sequence number, element count, root, wire format).
#ifndef TAGI_WORKER_COLLECTIVE_TCP_WIRE_H_
#define TAGI_WORKER_COLLECTIVE_TCP_WIRE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tagi::ring_internal {

inline void PutU32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline void PutU64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline uint32_t GetU32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
inline uint64_t GetU64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// The handshake that identifies the two ends of a ring link.
struct Hello {
  static constexpr size_t kBytes = 32;
  static constexpr uint64_t kMagic = 0x31474e5249474154;  // "TAGIRNG1"
  enum Role : uint32_t { kConnect = 1, kAccept = 2 };
  using Bytes = std::array<std::byte, kBytes>;

  Role role = kConnect;
  uint32_t rank = 0;
  uint32_t world = 0;
  uint64_t group = 0;

  Bytes Encode() const {
    Bytes b{};
    PutU64(&b[0], kMagic);
    PutU32(&b[8], role);
    PutU32(&b[12], rank);
    PutU32(&b[16], world);
    PutU64(&b[24], group);
    return b;
  }
  // Whether `b` is exactly `expected`; the reason in *why otherwise.
  static bool Matches(const Bytes& b, const Hello& expected, std::string* why);
};

// Opens every collective call on every link.
struct CallHeader {
  static constexpr size_t kBytes = 32;
  static constexpr uint32_t kMagic = 0x4c4c4143;  // "CALL"
  enum Op : uint32_t { kAllReduceSum = 1, kBroadcast = 2, kBarrier = 3 };
  using Bytes = std::array<std::byte, kBytes>;

  Op op = kAllReduceSum;
  uint32_t root = 0;
  uint64_t seq = 0;
  uint64_t count = 0;
  uint32_t wire = 0;  // WirePrecision of the payload

  Bytes Encode() const {
    Bytes b{};
    PutU32(&b[0], kMagic);
    PutU32(&b[4], op);
    PutU64(&b[8], seq);
    PutU64(&b[16], count);
    PutU32(&b[24], root);
    PutU32(&b[28], wire);
    return b;
  }
  static bool Matches(const Bytes& b, const CallHeader& expected, std::string* why);
};

}  // namespace tagi::ring_internal

#endif  // TAGI_WORKER_COLLECTIVE_TCP_WIRE_H_
