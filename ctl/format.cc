#include "ctl/format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/progress_bar.h"

namespace tagi {
namespace {

std::string StateName(tagi::v1::JobState s) { return tagi::v1::JobState_Name(s); }

// The length of the UTF-8 sequence at text[i], or 0 when it is not one
// (overlong forms and surrogates included).
size_t Utf8Length(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  const size_t n = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >> 4) == 0xE ? 3
                   : (c >= 0xF0 && c <= 0xF4)                ? 4
                                                             : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) >> 6) != 0x2) return 0;
  }
  if (n == 3 && c == 0xE0 && byte(i + 1) < 0xA0) return 0;   // overlong
  if (n == 3 && c == 0xED && byte(i + 1) >= 0xA0) return 0;  // surrogate
  if (n == 4 && c == 0xF0 && byte(i + 1) < 0x90) return 0;   // overlong
  if (n == 4 && c == 0xF4 && byte(i + 1) >= 0x90) return 0;  // past U+10FFFF
  return n;
}

bool IsBidiControl(absl::string_view seq) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(seq[k]); };
  return b(0) == 0xE2 && ((b(1) == 0x80 && b(2) >= 0xAA && b(2) <= 0xAE) ||
                          (b(1) == 0x81 && b(2) >= 0xA6 && b(2) <= 0xA9));
}

// Untrusted text, or `empty` when there is none.
std::string Shown(absl::string_view text, absl::string_view empty) {
  return text.empty() ? std::string(empty) : Printable(text);
}

std::string ProgressText(const tagi::v1::Job& job) {
  const auto& p = job.progress();
  if (p.total_steps() == 0) return "-";
  return absl::StrFormat("%d%%", static_cast<int>(100 * std::min(p.global_step(), p.total_steps()) /
                                                  p.total_steps()));
}

std::string Time(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms),
                          absl::LocalTimeZone());
}

}  // namespace

std::string Printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = Utf8Length(text, i);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == 0x1B) {
      out += "\\e";
    } else if (n == 1 && c >= 0x20 && c != 0x7F) {
      out += static_cast<char>(c);
    } else if (n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) {
      // A C1 control (U+0080..U+009F): CSI and friends on many terminals.
      absl::StrAppendFormat(&out, "\\x%02x\\x%02x", c, static_cast<unsigned char>(text[i + 1]));
      i += 2;
      continue;
    } else if (n == 3 && IsBidiControl(text.substr(i, 3))) {
      // Reorders what follows on the terminal (U+202A..U+202E, U+2066..U+2069).
      absl::StrAppendFormat(&out, "\\x%02x\\x%02x\\x%02x", c, static_cast<unsigned char>(text[i + 1]),
                            static_cast<unsigned char>(text[i + 2]));
      i += 3;
      continue;
    } else if (n > 1) {
      out.append(text.data() + i, n);
      i += n;
      continue;
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
    ++i;
  }
  return out;
}

std::string LatestMetric(const tagi::v1::Job& job) {
  const auto& epochs = job.progress().epochs();
  if (epochs.empty()) return "";
  const auto& last = epochs[epochs.size() - 1];
  if (job.spec().head().has_classification()) {
    return absl::StrFormat("test accuracy %.2f%%", 100.0 * last.test_accuracy());
  }
  return absl::StrFormat("test RMSE %.4f", last.test_rmse());
}

std::string WatchLine(const tagi::v1::Job& job) {
  const auto& p = job.progress();
  std::string line = absl::StrCat(Printable(job.id()), "  ", StateName(job.state()));
  if (job.state() == tagi::v1::PENDING || p.total_steps() == 0) {
    return absl::StrCat(line, "  ", Printable(job.reason()));
  }
  const std::string label = absl::StrFormat("  epoch %d/%d", p.epoch() + 1, job.spec().epochs());
  absl::StrAppend(&line, RenderProgressBar(label, p.global_step(), p.total_steps(),
                                           p.samples_per_second(),
                                           absl::Seconds(p.eta_seconds()), 24));
  const std::string metric = LatestMetric(job);
  if (!metric.empty()) absl::StrAppend(&line, "  ", metric);
  return line;
}

std::string JobTable(const std::vector<tagi::v1::Job>& jobs) {
  std::string out = absl::StrFormat("%-10s %-16s %-10s %5s %8s  %-22s %s\n", "ID", "NAME", "STATE",
                                    "WORLD", "PROGRESS", "METRIC", "REASON");
  for (const auto& j : jobs) {
    absl::StrAppendFormat(&out, "%-10s %-16s %-10s %5d %8s  %-22s %s\n", Printable(j.id()),
                          Shown(j.spec().name(), "-"), StateName(j.state()), j.world_size(),
                          ProgressText(j), LatestMetric(j), Printable(j.reason()));
  }
  return out;
}

std::string JobDetails(const tagi::v1::Job& j) {
  const auto& p = j.progress();
  std::string out = absl::StrFormat(
      "job        %s (%s)\nstate      %s: %s\nworld      %d  generation %d  workers %s\n"
      "submitted  %s  started %s  ended %s\n",
      Printable(j.id()), Shown(j.spec().name(), "unnamed"), StateName(j.state()),
      Printable(j.reason()), j.world_size(), j.generation(),
      j.workers().empty() ? "-" : Printable(absl::StrJoin(j.workers(), ",")),
      Time(j.submit_time_ms()),
      Time(j.start_time_ms()), Time(j.end_time_ms()));
  if (j.max_world_size() > 0 || j.worlds_size() > 1) {
    // Elastic (or resized): the bounds and the worlds it went through, as
    // tagi-train --world-schedule takes them.
    std::string worlds;
    for (const auto& w : j.worlds()) {
      absl::StrAppend(&worlds, worlds.empty() ? "" : ",", w.from_step(), ":", w.world());
    }
    absl::StrAppendFormat(&out, "elastic    %d-%d ranks, grew %s, worlds %s\n",
                          j.min_world_size(), j.max_world_size(),
                          j.resizes() == 1 ? "once" : Counted(j.resizes(), "time"),
                          worlds.empty() ? "-" : worlds);
  }
  if (p.total_steps() > 0) {
    absl::StrAppendFormat(&out,
                          "progress   step %d/%d  %s samples/s  step %.2f ms  all-reduce %.2f ms "
                          "(%d bytes%s)\n",
                          p.global_step(), p.total_steps(), HumanCount(p.samples_per_second()),
                          1e3 * p.step_seconds(), 1e3 * p.allreduce_seconds(),
                          p.allreduce_bytes(),
                          p.allreduce_buckets() > 1
                              ? absl::StrFormat(" in %d buckets, %.2f ms not overlapped",
                                                p.allreduce_buckets(),
                                                1e3 * p.allreduce_wait_seconds())
                              : "");
  }
  const bool classification = j.spec().head().has_classification();
  for (const auto& e : p.epochs()) {
    const std::string metric =
        classification
            ? absl::StrFormat("train acc %.2f%%  test acc %.2f%%  ECE %.4f  Brier %.4f",
                              100 * e.train_accuracy(), 100 * e.test_accuracy(), e.test_ece(),
                              e.test_brier())
            : absl::StrFormat("test RMSE %.4f  cover68 %.1f%%  cover95 %.1f%%",
                              e.test_rmse(), 100 * e.test_coverage_68(),
                              100 * e.test_coverage_95());
    absl::StrAppendFormat(&out, "epoch %-4d %s  test log-lik %.4f  sigma_v %g  %.2f s\n",
                          e.epoch(), metric, e.test_log_likelihood(), e.sigma_v(), e.seconds());
  }
  if (j.snapshot_time_ms() > 0) {
    absl::StrAppendFormat(&out, "snapshot   step %d, %d bytes, stored %s\n", j.snapshot_step(),
                          j.snapshot_bytes(), Time(j.snapshot_time_ms()));
  }
  for (const auto& r : j.recoveries()) {
    absl::StrAppendFormat(&out, "recovery   generation %d failed at step %d: %s\n",
                          r.failed_generation(), r.failed_at_step(), Printable(r.reason()));
    if (r.new_generation() > 0) {
      absl::StrAppendFormat(&out, "           generation %d resumed at step %d (%s)",
                            r.new_generation(), r.resumed_from_step(), Printable(r.snapshot()));
      if (r.first_step_ms() > 0) {
        absl::StrAppendFormat(&out, "; first step %d ms after detection, %d steps redone",
                              r.first_step_ms() - r.detected_ms(), r.steps_redone());
      }
      out += "\n";
    }
  }
  if (!j.model_checksum().empty()) {
    absl::StrAppendFormat(&out, "model      %d bytes, parameter checksum %s\n", j.model_bytes(),
                          Printable(j.model_checksum()));
  }
  return out;
}

std::string WorkerTable(const std::vector<tagi::v1::WorkerInfo>& workers) {
  std::string out = absl::StrFormat("%-8s %-6s %-10s %-6s %-8s %-22s %s\n", "ID", "STATE", "JOB",
                                    "RANK", "DEVICE", "ADDRESS", "HOST");
  for (const auto& w : workers) {
    absl::StrAppendFormat(&out, "%-8s %-6s %-10s %-6s %-8s %-22s %s\n", Printable(w.id()),
                          Printable(w.state()), Shown(w.job_id(), "-"),
                          w.job_id().empty() ? "-" : absl::StrCat(w.rank()),
                          Shown(w.device(), "cpu"), Printable(w.address()),
                          Printable(w.hostname()));
  }
  return out;
}

std::string LogLineText(const tagi::v1::JobLogLine& line) {
  return absl::StrFormat(
      "%s rank %d gen %d %s: %s",
      absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::FromUnixMillis(line.time_ms()),
                       absl::LocalTimeZone()),
      line.rank(), line.generation(), Printable(line.worker_id()), Printable(line.text()));
}

}  // namespace tagi
