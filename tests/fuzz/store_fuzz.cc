// Fuzzes the store's key handling (InMemoryStore, PrefixStore,
// JobStorePrefix): the coordinator serves workers' StoreSet / StoreGet /
// StoreWait / StoreAdd calls from one InMemoryStore, keys scoped by
// JobStorePrefix(job, generation), and drops a job's keys with DeletePrefix.
//
// An input is a program: a value size limit, a job id and generation for
// the prefix, then operations with hostile keys, values, deltas and zero or
// negative wait timeouts (nothing ever blocks). A std::map models the
// store; after every operation the result, size() and bytes() must agree
// with the model, and a refused operation must change nothing.
#include <fuzzer/FuzzedDataProvider.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/store.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using Model = std::map<std::string, std::string>;

class Program {
 public:
  Program(const uint8_t* data, size_t size)
      : in_(data, size),
        max_value_bytes_(in_.ConsumeIntegralInRange<size_t>(0, 64)),
        store_(max_value_bytes_),
        prefix_(Prefix(in_)),
        scoped_(prefix_, store_) {}

  void Run() {
    while (in_.remaining_bytes() > 0) {
      Step();
      FUZZ_CHECK(store_.size() == model_.size(), "size %zu, model %zu", store_.size(),
                 model_.size());
      size_t bytes = 0;
      for (const auto& [k, v] : model_) bytes += k.size() + v.size();
      FUZZ_CHECK(store_.bytes() == bytes, "bytes %zu, model %zu", store_.bytes(), bytes);
    }
  }

 private:
  // Two statements: the order in which function arguments consume the input
  // is unspecified.
  static std::string Prefix(FuzzedDataProvider& in) {
    const std::string job = in.ConsumeRandomLengthString(24);
    return tagi::JobStorePrefix(job, in.ConsumeIntegral<uint64_t>());
  }
  static bool ValidKey(const std::string& key) {
    return !key.empty() && key.size() <= tagi::InMemoryStore::kMaxKeyBytes;
  }
  static void ExpectCode(const absl::Status& st, absl::StatusCode code, const char* op) {
    FUZZ_CHECK(st.code() == code && (st.ok() || !st.message().empty()), "%s: got %s, want %s", op,
               st.ToString().c_str(), absl::StatusCodeToString(code).c_str());
  }

  std::string Key() { return in_.ConsumeRandomLengthString(600); }
  absl::Duration Timeout() {
    if (in_.ConsumeBool()) return absl::ZeroDuration();
    return -absl::Nanoseconds(in_.ConsumeIntegralInRange<int64_t>(0, INT64_MAX));
  }

  void Step() {
    const bool scoped = in_.ConsumeBool();
    tagi::Store& s = scoped ? static_cast<tagi::Store&>(scoped_) : store_;
    const std::string prefix = scoped ? prefix_ : "";
    switch (in_.ConsumeIntegralInRange(0, 4)) {
      case 0:
        return Set(s, prefix);
      case 1:
        return Get(s, prefix);
      case 2:
        return Wait(s, prefix);
      case 3:
        return Add(s, prefix);
      default:
        return DeletePrefix();
    }
  }

  void Set(tagi::Store& s, const std::string& prefix) {
    const std::string key = Key();
    const std::string value = in_.ConsumeRandomLengthString(80);
    const absl::Status st = s.Set(key, value);
    if (!ValidKey(prefix + key) || value.size() > max_value_bytes_) {
      return ExpectCode(st, absl::StatusCode::kInvalidArgument, "Set");
    }
    ExpectCode(st, absl::StatusCode::kOk, "Set");
    model_[prefix + key] = value;
  }

  void Get(tagi::Store& s, const std::string& prefix) {
    const std::string key = Key();
    auto got = s.Get(key, Timeout());
    const std::string full = prefix + key;
    if (!ValidKey(full)) return ExpectCode(got.status(), absl::StatusCode::kInvalidArgument, "Get");
    auto it = model_.find(full);
    if (it == model_.end()) {
      return ExpectCode(got.status(), absl::StatusCode::kDeadlineExceeded, "Get");
    }
    ExpectCode(got.status(), absl::StatusCode::kOk, "Get");
    FUZZ_CHECK(*got == it->second, "Get returned another value");
  }

  void Wait(tagi::Store& s, const std::string& prefix) {
    std::vector<std::string> keys(in_.ConsumeIntegralInRange(0, 4));
    bool valid = true, present = true;
    for (auto& k : keys) {
      k = Key();
      valid = valid && ValidKey(prefix + k);
      present = present && model_.count(prefix + k) > 0;
    }
    const absl::Status st = s.Wait(keys, Timeout());
    if (!valid) return ExpectCode(st, absl::StatusCode::kInvalidArgument, "Wait");
    ExpectCode(st, present ? absl::StatusCode::kOk : absl::StatusCode::kDeadlineExceeded, "Wait");
  }

  void Add(tagi::Store& s, const std::string& prefix) {
    const std::string key = Key();
    const int64_t delta = in_.ConsumeIntegral<int64_t>();
    auto got = s.Add(key, delta);
    const std::string full = prefix + key;
    if (!ValidKey(full)) return ExpectCode(got.status(), absl::StatusCode::kInvalidArgument, "Add");
    int64_t value = 0;
    if (auto it = model_.find(full); it != model_.end()) {
      const std::string& text = it->second;
      auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec != std::errc() || ptr != text.data() + text.size()) {
        return ExpectCode(got.status(), absl::StatusCode::kFailedPrecondition, "Add");
      }
    }
    int64_t sum = 0;
    if (__builtin_add_overflow(value, delta, &sum)) {
      return ExpectCode(got.status(), absl::StatusCode::kOutOfRange, "Add");
    }
    ExpectCode(got.status(), absl::StatusCode::kOk, "Add");
    FUZZ_CHECK(*got == sum, "Add returned %lld, want %lld", static_cast<long long>(*got),
               static_cast<long long>(sum));
    model_[full] = std::to_string(sum);
  }

  // As the coordinator does when a job ends: on the base store only.
  void DeletePrefix() {
    const std::string prefix =
        in_.ConsumeBool() ? prefix_.substr(0, in_.ConsumeIntegralInRange<size_t>(0, prefix_.size()))
                          : in_.ConsumeRandomLengthString(32);
    size_t expected = 0;
    for (auto it = model_.lower_bound(prefix);
         it != model_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      it = model_.erase(it);
      ++expected;
    }
    const size_t removed = store_.DeletePrefix(prefix);
    FUZZ_CHECK(removed == expected, "DeletePrefix removed %zu, want %zu", removed, expected);
  }

  FuzzedDataProvider in_;
  const size_t max_value_bytes_;
  tagi::InMemoryStore store_;
  const std::string prefix_;
  tagi::PrefixStore scoped_;
  Model model_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Program(data, size).Run();
  return 0;
}
