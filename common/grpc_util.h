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
#include "absl/status/statusor.h"
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
absl::Status CheckProtocol(const grpc::ServerContextBase& context);

// How a client reaches the coordinator. Default: plaintext, no token.
struct ClientSecurity {
  // PEM of the CA that signed the coordinator's certificate; empty: plaintext.
  std::string tls_ca_pem;
  // The client's certificate chain and key (PEM) for mutual TLS; both or
  // neither, and only with tls_ca_pem.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // Metadata sent on every call of the channel when the key is not empty
  // (a join token, or "authorization: Bearer ...").
  std::string metadata_key;
  std::string metadata_value;
};

// A PEM file's contents; errors name `flag` and the path (unreadable, or
// no "-----BEGIN" line).
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& flag);

// Reads the files named by --tls-ca, --tls-cert and --tls-key (any may be
// empty) into `security`; an error names the flag and the path. Also
// refuses a certificate without its key (or the reverse), or either
// without a CA.
absl::Status LoadClientTls(const std::string& ca_file, const std::string& cert_file,
                           const std::string& key_file, ClientSecurity& security);

// A channel to host:port with our limits (message sizes, keepalive), TLS
// and per-call metadata as `security` says.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const ClientSecurity& security = {});

// A message for a failed call that adds what a plaintext/TLS mismatch or a
// refused token usually means, for the CLI and the worker's logs.
std::string ExplainCallFailure(const absl::Status& status, bool tls);

// Largest gRPC message either side accepts (model chunks are 1 MiB).
inline constexpr int kMaxGrpcMessageBytes = 8 << 20;

}  // namespace tagi

#endif  // TAGI_COMMON_GRPC_UTIL_H_
