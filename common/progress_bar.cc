#include "common/progress_bar.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tagi {

std::string HumanCount(double value) {
  if (!std::isfinite(value)) return "?";
  if (value >= 1e6) return absl::StrFormat("%.2fM", value / 1e6);
  if (value >= 1e4) return absl::StrFormat("%.1fk", value / 1e3);
  return absl::StrFormat("%.0f", value);
}

std::string RenderProgressBar(const std::string& label, size_t done, size_t total,
                              double samples_per_second, absl::Duration eta, int bar_width) {
  // Integer arithmetic: 29/100 must read 29 %, not 28 % from 0.29 * 100.
  const size_t clamped = std::min(done, total);
  const int percent = total == 0 ? 100 : static_cast<int>(clamped * 100 / total);
  const int filled =
      total == 0 ? bar_width : static_cast<int>(clamped * static_cast<size_t>(bar_width) / total);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < bar_width) {
    bar += '>';
    bar.append(static_cast<size_t>(bar_width - filled - 1), ' ');
  }
  // Before the first step there is no rate to go by: an ETA of 0 then
  // (what a job reports until it has one) means "unknown", not "done".
  const bool measured = clamped >= total || (done > 0 && samples_per_second > 0.0);
  std::string eta_text = "?";
  if (measured && eta != absl::InfiniteDuration() && eta >= absl::ZeroDuration()) {
    eta_text = absl::StrFormat("%.1fs", absl::ToDoubleSeconds(eta));
  }
  return absl::StrFormat("%s [%s] %3d%% %d/%d  %s samples/s  ETA %s", label, bar,
                         percent, done, total,
                         HumanCount(samples_per_second), eta_text);
}

void ProgressPrinter::Update(const std::string& line, bool force) {
  const absl::Time now = clock_.Now();
  if (!force && now - last_ < min_interval_) return;
  last_ = now;
  // Pad with spaces to erase the tail of a longer previous line.
  const size_t pad = last_len_ > line.size() ? last_len_ - line.size() : 0;
  std::fprintf(out_, "\r%s%*s", line.c_str(), static_cast<int>(pad), "");
  std::fflush(out_);
  last_len_ = line.size();
  drawn_ = true;
}

void ProgressPrinter::Finish() {
  if (!drawn_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  drawn_ = false;
  last_len_ = 0;
  last_ = absl::InfinitePast();
}

std::string Counted(int64_t n, const std::string& noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

}  // namespace tagi
