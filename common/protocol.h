// The wire protocol's version, carried by every RPC as gRPC metadata so that
// a worker or client of another version is refused with a message instead
// of misreading messages.
#ifndef TAGI_COMMON_PROTOCOL_H_
#define TAGI_COMMON_PROTOCOL_H_

namespace tagi {

inline constexpr char kProtocolMetadataKey[] = "tagi-protocol";
inline constexpr char kProtocolVersion[] = "1";

}  // namespace tagi

#endif  // TAGI_COMMON_PROTOCOL_H_
