// Raw TCP clients for the hostile-input tests: connections from a chosen
// loopback source address (127.0.0.0/8 is all loopback on Linux, so one
// test can play many client hosts), bytes sent exactly as given, replies
// read with deadlines, and the coordinator's memory read from /proc.
#ifndef TAGI_TESTS_HOSTILE_RAW_HTTP_H_
#define TAGI_TESTS_HOSTILE_RAW_HTTP_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "tests/testing/proc_status.h"  // RssKib, PeakRssKib: the floods' figures

namespace tagi::testing {

// A connected socket to 127.0.0.1:port from `from` (e.g. "127.0.0.3");
// -1 when the connection failed.
int ConnectFrom(const std::string& from, int port);

// Sends all of `bytes`; false when the peer closed or reset first.
bool SendAll(int fd, const std::string& bytes);

// Reads until the peer closes or `timeout` passes; what came.
std::string ReadUntilClosed(int fd, absl::Duration timeout);

// True when the peer has closed the connection (a read returns 0 or an
// error within `wait`); false while it is open and silent.
bool PeerClosed(int fd, absl::Duration wait);

// One whole request on a fresh connection; the raw reply ("" when none).
std::string Exchange(int port, const std::string& request,
                     absl::Duration timeout = absl::Seconds(10), const std::string& from = "127.0.0.1");

// The HTTP status of a raw reply; 0 when it has none.
int StatusOf(const std::string& reply);


}  // namespace tagi::testing

#endif  // TAGI_TESTS_HOSTILE_RAW_HTTP_H_
