// Waiting for SIGINT / SIGTERM without global handlers: main() blocks the
// signals before starting threads, then a dedicated thread (or main) waits
// for one with a deadline. Thread-safe.
#ifndef TAGI_COMMON_SIGNALS_H_
#define TAGI_COMMON_SIGNALS_H_

#include "absl/time/time.h"

namespace tagi {

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and in threads it
// creates afterwards). Call first thing in main().
void BlockTerminationSignals();

// Waits up to `timeout` for one of them; returns the signal or 0.
int WaitForTerminationSignal(absl::Duration timeout);

}  // namespace tagi

#endif  // TAGI_COMMON_SIGNALS_H_
