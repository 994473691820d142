// absl::Status <-> grpc::Status, in one place (the codes are numerically the
// same), plus the client and server halves of the protocol-version check
// and channel construction with our defaults. Includes grpcpp: only the
// service binaries and their clients include this header.
#ifndef TAGI_COMMON_GRPC_UTIL_H_
#define TAGI_COMMON_GRPC_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tagi {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// A client context with the protocol metadata and a deadline (none for
// absl::InfiniteDuration(): only for streams guarded by their own
// liveness check, like the worker's session).
std::unique_ptr<grpc::ClientContext> MakeClientContext(absl::Duration timeout);

// OK when the caller sent our protocol version; FailedPrecondition with a
// message naming both versions otherwise.
absl::Status CheckProtocol(const grpc::ServerContext& context);

// A channel to host:port with our limits (message sizes, keepalive).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target);

// Largest gRPC message either side accepts (model chunks are 1 MiB).
inline constexpr int kMaxGrpcMessageBytes = 8 << 20;

}  // namespace tagi

#endif  // TAGI_COMMON_GRPC_UTIL_H_
