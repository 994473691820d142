// CSV reader for regression data.
//
// Format: one sample per line, comma-separated numeric fields, optional
// spaces or tabs around each field, '\n' or "\r\n" line ends, an optional
// header line (skipped unparsed), blank lines at the end ignored. The last
// `target_columns` columns are targets, the others inputs; there must be at
// least one input column and every line must have the same number of
// columns as the first data line.
//
// Inputs must be finite numbers. A target may be empty or "nan" (any case)
// meaning missing; it is stored as a quiet NaN, which the trainer skips.
//
// Errors: NotFound when the file does not exist, PermissionDenied when it
// cannot be opened, InvalidArgument for bad contents. Messages name the
// path, the 1-based line and column, and the offending text.
// Thread-compatible (no shared state).
#ifndef TAGI_WORKER_DATA_CSV_H_
#define TAGI_WORKER_DATA_CSV_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace tagi::data {

// Reads at most `limit` data rows (0: all) into a regression Dataset with
// output_dim = target_columns. InvalidArgument when target_columns is 0 or
// the file has no data rows.
absl::StatusOr<Dataset> LoadCsvRegression(const std::string& path,
                                          size_t target_columns,
                                          bool has_header, size_t limit);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_CSV_H_
