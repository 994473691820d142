#include "common/refusal_log.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/peer.h"

namespace tagi {

std::optional<std::string> RefusalLog::Note(const std::string& peer, const std::string& what) {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  const auto key = std::make_pair(ClientOfPeer(peer), what);
  auto it = entries_.find(key);
  if (it != entries_.end() && now - it->second.logged < interval_) {
    ++it->second.silent;
    return std::nullopt;
  }
  std::string line = absl::StrCat("refused ", what, " from ", peer);
  if (it != entries_.end() && it->second.silent > 0) {
    absl::StrAppendFormat(&line, " (and %d more from %s not logged since %s)", it->second.silent,
                          key.first, absl::FormatTime("%H:%M:%S", it->second.logged,
                                                      absl::LocalTimeZone()));
  }
  if (it == entries_.end()) {
    if (entries_.size() >= max_pairs_) {
      auto oldest = std::min_element(entries_.begin(), entries_.end(), [](const auto& a,
                                                                          const auto& b) {
        return a.second.logged < b.second.logged;
      });
      entries_.erase(oldest);
    }
    it = entries_.emplace(key, Entry{}).first;
  }
  it->second.logged = now;
  it->second.silent = 0;
  return line;
}

void LogRefusal(RefusalLog* log, const char* program, const std::string& peer,
                const std::string& what) {
  if (log == nullptr) {
    std::fprintf(stderr, "%s: refused %s from %s\n", program, what.c_str(), peer.c_str());
  } else if (std::optional<std::string> line = log->Note(peer, what)) {
    std::fprintf(stderr, "%s: %s\n", program, line->c_str());
  }
}

}  // namespace tagi
