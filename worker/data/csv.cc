#include "worker/data/csv.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tagi::data {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("CSV file ", path, " does not exist"));
  }
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CSV file ", path, " is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot open CSV file ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("error reading CSV file ", path));
  }
  return std::move(buffer).str();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Splits on every `sep`; n separators give n + 1 pieces. (Not
// absl::StrSplit: this build's absl::string_view is not std::string_view.)
std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != sep) continue;
    out.push_back(s.substr(start, i - start));
    start = i + 1;
  }
  out.push_back(s.substr(start));
  return out;
}

// Parses one field. Returns the value, or a description of what is wrong
// (without the location, which the caller adds).
absl::StatusOr<float> ParseField(std::string_view field, bool is_target) {
  if (field.empty()) {
    if (is_target) return std::numeric_limits<float>::quiet_NaN();
    return absl::InvalidArgumentError(
        "empty input field (inputs may not be missing)");
  }
  std::string_view digits = field;
  // from_chars rejects a leading '+', which other tools write.
  if (digits.size() > 1 && digits[0] == '+' && digits[1] != '-' &&
      digits[1] != '+') {
    digits.remove_prefix(1);
  }
  float value = 0.0f;
  const auto [end, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range) {
    return absl::InvalidArgumentError("number out of float range");
  }
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    return absl::InvalidArgumentError("expected a number, found a field that is not one");
  }
  if (std::isnan(value)) {
    if (is_target) return std::numeric_limits<float>::quiet_NaN();
    return absl::InvalidArgumentError(absl::StrCat(
        "NaN input (inputs must be finite)"));
  }
  if (std::isinf(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "infinite ", is_target ? "target" : "input"));
  }
  return value;
}

// Accumulates parsed rows; the first data row fixes the column count.
class RowParser {
 public:
  RowParser(const std::string& path, size_t target_columns)
      : path_(path), target_columns_(target_columns) {}

  absl::Status AddLine(std::string_view line, size_t line_number) {
    std::vector<std::string_view> fields = Split(line, ',');
    if (columns_ == 0) {
      if (fields.size() <= target_columns_) {
        return absl::InvalidArgumentError(absl::StrCat(
            path_, ": line ", line_number, ": found ", fields.size(),
            " columns but ", target_columns_,
            " target column(s) plus at least 1 input column are needed"));
      }
      columns_ = fields.size();
      data_.input_dim = columns_ - target_columns_;
      data_.output_dim = target_columns_;
    } else if (fields.size() != columns_) {
      return absl::InvalidArgumentError(absl::StrCat(
          path_, ": line ", line_number, ": expected ", columns_,
          " columns (as on the first data line), found ", fields.size()));
    }
    for (size_t c = 0; c < fields.size(); ++c) {
      const bool is_target = c >= data_.input_dim;
      absl::StatusOr<float> value = ParseField(Trim(fields[c]), is_target);
      if (!value.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path_, ": line ", line_number, ", column ", c + 1,
                         ": ", value.status().message()));
      }
      (is_target ? data_.targets : data_.inputs).push_back(*value);
    }
    ++data_.num_samples;
    return absl::OkStatus();
  }

  size_t rows() const { return data_.num_samples; }
  Dataset Take() { return std::move(data_); }

 private:
  const std::string& path_;
  const size_t target_columns_;
  size_t columns_ = 0;
  Dataset data_;
};

// The label column's index, from the header when the label is named.
absl::StatusOr<size_t> LabelIndex(const std::vector<std::string_view>& first,
                                  const std::string& name, const CsvLabel& label,
                                  bool has_header) {
  if (label.index) {
    if (*label.index >= first.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": label column index ", *label.index, " is past the last column (the first "
          "line has ", first.size(), " columns, indices 0..", first.size() - 1, ")"));
    }
    return *label.index;
  }
  if (!has_header) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": the label column is named but the file has no header (set csv_has_header, or "
        "give label_column_index)"));
  }
  for (size_t c = 0; c < first.size(); ++c) {
    std::string_view field = Trim(first[c]);
    if (field.size() >= 2 && field.front() == '"' && field.back() == '"') {
      field = field.substr(1, field.size() - 2);
    }
    if (field == label.name) return c;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      name, ": the header has no column named \"", label.name, "\""));
}

absl::StatusOr<int32_t> ParseLabel(std::string_view field, int num_classes) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (ec != std::errc() || end != field.data() + field.size()) {
    return absl::InvalidArgumentError("the label is not an integer");
  }
  if (v < 0 || v >= num_classes) {
    return absl::InvalidArgumentError(absl::StrCat("label ", v, " is out of range; expected 0..",
                                                   num_classes - 1, " (num_classes ",
                                                   num_classes, ")"));
  }
  return static_cast<int32_t>(v);
}

}  // namespace

absl::StatusOr<Dataset> ParseCsvClassification(std::string_view text, const std::string& name,
                                               const CsvLabel& label, bool has_header,
                                               int num_classes) {
  std::vector<std::string_view> lines = Split(text, '\n');
  while (!lines.empty() && Trim(lines.back()).empty()) lines.pop_back();
  if (lines.empty() || (has_header && lines.size() == 1)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no data rows"));
  }
  const std::vector<std::string_view> first = Split(lines[0], ',');
  if (first.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": line 1 has ", first.size(), " column; a label and at least one feature are "
        "needed"));
  }
  TAGI_ASSIGN_OR_RETURN(const size_t label_col, LabelIndex(first, name, label, has_header));
  Dataset out;
  out.num_classes = num_classes;
  out.input_dim = first.size() - 1;
  for (size_t i = has_header ? 1 : 0; i < lines.size(); ++i) {
    const std::vector<std::string_view> fields = Split(lines[i], ',');
    if (fields.size() != first.size()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": line ", i + 1, ": expected ",
                                                     first.size(), " columns, found ",
                                                     fields.size()));
    }
    for (size_t c = 0; c < fields.size(); ++c) {
      const std::string_view field = Trim(fields[c]);
      absl::Status st;
      if (c == label_col) {
        absl::StatusOr<int32_t> y = ParseLabel(field, num_classes);
        if (y.ok()) out.labels.push_back(*y);
        st = y.status();
      } else {
        absl::StatusOr<float> x = ParseField(field, false);
        if (x.ok()) out.inputs.push_back(*x);
        st = x.status();
      }
      if (!st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": line ", i + 1, ", column ",
                                                       c + 1, ": ", st.message()));
      }
    }
    ++out.num_samples;
  }
  return out;
}

absl::StatusOr<Dataset> LoadCsvRegression(const std::string& path,
                                          size_t target_columns,
                                          bool has_header, size_t limit) {
  if (target_columns == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": target_columns must be at least 1"));
  }
  TAGI_ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(path));
  std::vector<std::string_view> lines = Split(text, '\n');
  // Blank lines at the end are ignored; blank lines elsewhere are an error.
  while (!lines.empty() && Trim(lines.back()).empty()) lines.pop_back();

  RowParser parser(path, target_columns);
  for (size_t i = has_header ? 1 : 0; i < lines.size(); ++i) {
    if (limit != 0 && parser.rows() == limit) break;
    const std::string_view line = lines[i];
    if (Trim(line).empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": line ", i + 1, ": blank line between data lines"));
    }
    TAGI_RETURN_IF_ERROR(parser.AddLine(line, i + 1));
  }
  if (parser.rows() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no data rows"));
  }
  return parser.Take();
}

}  // namespace tagi::data
