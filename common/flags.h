// Command-line parsing shared by the binaries: absl flags, but users may
// write flag names with dashes (--state-dir) as well as underscores
// (--state_dir), as the documentation does.
#ifndef TAGI_COMMON_FLAGS_H_
#define TAGI_COMMON_FLAGS_H_

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace tagi {

// Rewrites "--a-b[=v]" to "--a_b[=v]" in place (flag names only, never
// values or positional arguments, and nothing after a bare "--"), then
// runs absl::ParseCommandLine. Returns the positional arguments (argv[0]
// first).
std::vector<char*> ParseFlags(int argc, char** argv);

// Takes every "--NAME VALUE" and "--NAME=VALUE" (NAME with dashes or
// underscores) out of argv, in order, and returns the values: a flag that
// may be given many times, each value whole (absl's list flags keep only
// the last and split at commas). Call before ParseFlags. InvalidArgument
// when the last one has no value. Nothing after a bare "--" is looked at.
absl::StatusOr<std::vector<std::string>> TakeRepeatedFlag(int& argc, char** argv,
                                                          absl::string_view name);

// True for "host:port" and "[v6]:port" with a port in 0..65535.
bool ValidHostPort(const std::string& address);

// True when a valid HOST:PORT names a loopback host: 127.0.0.0/8,
// "localhost" or [::1]. "0.0.0.0" and "[::]" (every interface) are not.
bool IsLoopbackAddress(const std::string& address);

}  // namespace tagi

#endif  // TAGI_COMMON_FLAGS_H_
