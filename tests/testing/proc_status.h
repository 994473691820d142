// Figures of a running process from /proc/<pid>/status (Linux), for tests
// and benches that watch a server they started: -1 when unreadable.
#ifndef TAGI_TESTS_TESTING_PROC_STATUS_H_
#define TAGI_TESTS_TESTING_PROC_STATUS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace tagi::testing {

// The number in line "<field>: ..." (e.g. "Threads", "VmRSS" in KiB).
int64_t ProcStatusField(pid_t pid, const std::string& field);

inline int64_t RssKib(pid_t pid) { return ProcStatusField(pid, "VmRSS"); }
inline int64_t PeakRssKib(pid_t pid) { return ProcStatusField(pid, "VmHWM"); }
inline int64_t ThreadCount(pid_t pid) { return ProcStatusField(pid, "Threads"); }

}  // namespace tagi::testing

#endif  // TAGI_TESTS_TESTING_PROC_STATUS_H_
