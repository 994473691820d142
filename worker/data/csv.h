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
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace tagi::data {

// Reads at most `limit` data rows (0: all) into a regression Dataset with
// output_dim = target_columns. InvalidArgument when target_columns is 0 or
// the file has no data rows.
absl::StatusOr<Dataset> LoadCsvRegression(const std::string& path,
                                          size_t target_columns,
                                          bool has_header, size_t limit);

// CSV classification: the same format, one column holds integer class
// labels 0..num_classes-1 and every other column is a numeric feature.
// The label column is named (`name`, which needs a header; a header field
// may be wrapped in double quotes) or given by 0-based `index`.
struct CsvLabel {
  std::string name;
  std::optional<size_t> index;
};

// Largest CSV file CSV_CLASSIFICATION reads.
inline constexpr uint64_t kMaxCsvBytes = uint64_t{4} << 30;

// Parses `text` (the file `name`) into a classification Dataset.
// InvalidArgument naming `name`, the line and the column for a label that
// is not an integer or out of range, a feature that is not a finite number,
// a row of another width; and for a label column the header lacks or past
// the last column, fewer than 2 columns, no data rows. Quotes no field.
// REQUIRES: num_classes >= 1.
absl::StatusOr<Dataset> ParseCsvClassification(std::string_view text, const std::string& name,
                                               const CsvLabel& label, bool has_header,
                                               int num_classes);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_CSV_H_
