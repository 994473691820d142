// Waiting for SIGINT / SIGTERM / SIGHUP with a deadline.
//
// Blocking the signals in main() is not enough: libraries start threads
// before main() runs (OpenBLAS does, at load time), and the kernel delivers
// a process signal to any thread that does not block it, whose default
// action ends the process. So a handler is installed instead; it writes the
// signal number to a self-pipe, which WaitForTerminationSignal polls. The
// pipe is the process-wide state a signal handler can reach; it is created
// once by InstallTerminationHandler and never closed.
// Thread-safe after InstallTerminationHandler returns.
#ifndef TAGI_COMMON_SIGNALS_H_
#define TAGI_COMMON_SIGNALS_H_

#include "absl/time/time.h"

namespace tagi {

// Call first thing in main(). Later calls do nothing.
void InstallTerminationHandler();

// Waits up to `timeout` for one of the signals; returns it, or 0.
int WaitForTerminationSignal(absl::Duration timeout);

}  // namespace tagi

#endif  // TAGI_COMMON_SIGNALS_H_
