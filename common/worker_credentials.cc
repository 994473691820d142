#include "common/worker_credentials.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/auth.h"

namespace tagi {

absl::StatusOr<std::string> RandomHex(size_t n) {
  std::string bytes(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(bytes.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrFormat("getrandom: %s", std::strerror(errno)));
    }
    got += static_cast<size_t>(r);
  }
  return absl::BytesToHexString(bytes);
}

absl::StatusOr<WorkerKey> WorkerKey::FromHex(std::string_view text) {
  const absl::string_view hex =
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  const bool hex_digits =
      std::all_of(hex.begin(), hex.end(), [](char c) { return absl::ascii_isxdigit(c); });
  if (hex.size() != 2 * kWorkerKeyBytes || !hex_digits) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a worker key is %d hex digits", 2 * kWorkerKeyBytes));
  }
  return WorkerKey(absl::HexStringToBytes(hex));
}

absl::StatusOr<WorkerKey> WorkerKey::Generate() {
  absl::StatusOr<std::string> hex = RandomHex(kWorkerKeyBytes);
  if (!hex.ok()) return hex.status();
  return FromHex(*hex);
}

std::string WorkerKey::ToFileText() const { return absl::BytesToHexString(bytes_) + "\n"; }

std::string WorkerKey::SecretFor(std::string_view id, std::string_view certificate) const {
  // Ids are the coordinator's ("w-N"): none holds the separator, so a bound
  // message never equals an unbound one.
  const std::string message =
      certificate.empty() ? std::string(id)
                          : std::string(id) + "\ncert:" + std::string(certificate);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), bytes_.data(), static_cast<int>(bytes_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(mac), len));
}

bool WorkerKey::Verify(std::string_view id, std::string_view secret,
                       std::string_view certificate) const {
  if (id.find('\n') != std::string_view::npos) return false;
  return ConstantTimeEquals(SecretFor(id, certificate), secret);
}

}  // namespace tagi
