// ScratchDir: the unit tests' one temporary-directory helper. A fresh
// directory under the system temp dir, named after the running test (when
// there is one), removed with its contents when the object dies.
// Header-only so that unit-test binaries need no extra library.
// Thread-compatible; one object per test (or per fixture).
#ifndef TAGI_TESTS_TESTING_SCRATCH_DIR_H_
#define TAGI_TESTS_TESTING_SCRATCH_DIR_H_

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace tagi::testing {

class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string test =
        info != nullptr ? std::string(info->test_suite_name()) + "_" + info->name() : "setup";
    const std::string name = "tagi_test_" + test + "_" + std::to_string(::getpid()) + "_" +
                             std::to_string(counter++);
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The full path of `file` (which may name subdirectories) inside it.
  std::string Path(std::string_view file) const { return (path_ / file).string(); }

  // Writes `contents` to `file` (not atomically) and returns its full path.
  std::string Write(std::string_view file, std::string_view contents) const {
    const std::string p = Path(file);
    std::ofstream out(p, std::ios::binary);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    return p;
  }

  // Names of the entries in the directory, sorted.
  std::vector<std::string> List() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace tagi::testing

#endif  // TAGI_TESTS_TESTING_SCRATCH_DIR_H_
