// Progress bars for terminals (tagi-train now, tagictl watch later).
//
// RenderProgressBar is a pure function of its inputs, so tests check the
// text without a terminal; ProgressPrinter rate-limits redraws with an
// injected clock. ProgressPrinter is not thread-safe.
#ifndef TAGI_COMMON_PROGRESS_BAR_H_
#define TAGI_COMMON_PROGRESS_BAR_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/time/time.h"
#include "common/clock.h"

namespace tagi {

// e.g. "epoch 1/3 [=======>      ]  52% 31200/60000  20.1k samples/s  ETA 1.4s"
std::string RenderProgressBar(const std::string& label, size_t done, size_t total,
                              double samples_per_second, absl::Duration eta, int bar_width = 30);

// "20.1k", "1.23M": compact rates for bars and logs.
std::string HumanCount(double value);

// "1 worker", "3 workers", "0 workers": a count and its noun in the right
// number (the plural adds an s).
std::string Counted(int64_t n, const std::string& noun);

class ProgressPrinter {
 public:
  ProgressPrinter(std::FILE* out, Clock& clock, absl::Duration min_interval)
      : out_(out), clock_(clock), min_interval_(min_interval) {}
  // Redraws the line (carriage return, no newline) unless the last redraw
  // was less than min_interval ago; `force` redraws anyway.
  void Update(const std::string& line, bool force = false);
  // Ends the line (newline) if anything was drawn.
  void Finish();

 private:
  std::FILE* out_;
  Clock& clock_;
  absl::Duration min_interval_;
  absl::Time last_ = absl::InfinitePast();
  size_t last_len_ = 0;
  bool drawn_ = false;
};

}  // namespace tagi

#endif  // TAGI_COMMON_PROGRESS_BAR_H_
