// Worker credentials: the secret the coordinator gives each worker at
// registration, bound to the worker's id.
//
// The secret is HMAC-SHA256(key, id), or HMAC-SHA256(key, id "\ncert:" name)
// for a worker with a client certificate named `name`, under a key only the
// coordinator holds
// (its state dir's worker-key, 0600, so secrets outlive a restart; a random
// key per process without a state dir). So the coordinator stores nothing
// per worker, a secret proves which id it was issued for, and no worker's
// secret says anything about another's. Every worker-scoped call carries
// the id and the secret as metadata (kWorkerIdMetadataKey,
// kWorkerSecretMetadataKey).
// Thread-safe: WorkerKey is immutable after construction.
#ifndef TAGI_COMMON_WORKER_CREDENTIALS_H_
#define TAGI_COMMON_WORKER_CREDENTIALS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tagi {

inline constexpr char kWorkerIdMetadataKey[] = "tagi-worker-id";
inline constexpr char kWorkerSecretMetadataKey[] = "tagi-worker-secret";

// Bytes of a key; its file holds them hex-encoded.
inline constexpr size_t kWorkerKeyBytes = 32;

// `n` bytes from the kernel's CSPRNG (getrandom), hex-encoded; Internal
// when the kernel gives none.
absl::StatusOr<std::string> RandomHex(size_t n);

class WorkerKey {
 public:
  // A key from its hex text (a worker-key file's contents, surrounding
  // whitespace ignored); InvalidArgument unless it is kWorkerKeyBytes of hex.
  static absl::StatusOr<WorkerKey> FromHex(std::string_view text);
  // A fresh random key.
  static absl::StatusOr<WorkerKey> Generate();

  // The key as its file holds it (hex and a newline).
  std::string ToFileText() const;
  // The secret of worker `id`: 64 hex digits. With mutual TLS, `certificate`
  // names the client certificate the worker registered with (its subject's
  // common name, or its SAN), and the secret is valid only over a
  // connection authenticated by a certificate of that name: a secret copied
  // off a host is useless without the host's key. Empty: not bound (the
  // secret of a worker without a client certificate).
  std::string SecretFor(std::string_view id, std::string_view certificate = "") const;
  // True when `secret` is `id`'s (bound to `certificate`); the time taken
  // does not depend on where a wrong secret differs.
  bool Verify(std::string_view id, std::string_view secret,
              std::string_view certificate = "") const;

 private:
  explicit WorkerKey(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string bytes_;
};

}  // namespace tagi

#endif  // TAGI_COMMON_WORKER_CREDENTIALS_H_
