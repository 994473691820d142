// Data roots: the directories a worker may read job data from.
//
// A job names its data files, and whoever can submit a job would otherwise
// make every worker open any file it can read (/etc/shadow, a key) and put
// what the readers say about it in the job's failure reason, which every
// API client sees. tagi-worker therefore reads data only under the roots
// its operator allows (--data-root), and refuses other paths before it
// opens, or even looks for, them.
#ifndef TAGI_WORKER_DATA_DATA_ROOTS_H_
#define TAGI_WORKER_DATA_DATA_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tagi::data {

// Debian's packaged data sets (/usr/share/datasets: dataset-fashion-mnist
// and friends) and the worker's own data directory (/var/lib/tagi/data).
std::vector<std::string> DefaultDataRoots();

// OK when `path` lies under one of `roots` once both are made absolute and
// resolved: `..` and `.` removed, symlinks of the part that exists followed
// (so a link inside a root that points outside it is outside).
// PermissionDenied otherwise, naming `field`, the path as given, the roots
// and the flag; it says nothing about the file (whether it exists, what it
// holds).
absl::Status CheckUnderRoots(const std::string& field, const std::string& path,
                             const std::vector<std::string>& roots);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_DATA_ROOTS_H_
