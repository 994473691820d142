// The client host of a gRPC peer string, for limits and logs kept per host
// (each connection has its own port).
#ifndef TAGI_COMMON_PEER_H_
#define TAGI_COMMON_PEER_H_

#include <string>
#include <string_view>

namespace tagi {

// "ipv4:10.0.0.5:4711" -> "ipv4:10.0.0.5"; "ipv6:[::1]:80" -> "ipv6:[::1]";
// anything without a port (a unix socket, a bare address such as REST's
// "::1") is returned as it is.
inline std::string ClientOfPeer(std::string_view peer) {
  size_t end = std::string_view::npos;
  if (peer.substr(0, 6) == "ipv6:[") {
    const size_t bracket = peer.find(']');
    if (bracket != std::string_view::npos && bracket + 2 < peer.size() &&
        peer[bracket + 1] == ':') {
      end = bracket + 1;
    }
  } else if (peer.substr(0, 5) == "ipv4:") {
    const size_t colon = peer.rfind(':');
    if (colon > 4 && colon + 1 < peer.size()) end = colon;
  }
  return std::string(peer.substr(0, end));
}

}  // namespace tagi

#endif  // TAGI_COMMON_PEER_H_
