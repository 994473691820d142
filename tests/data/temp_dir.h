// TempDir: a fresh directory under the system temp dir for one test,
// removed with everything in it when the object goes out of scope.
#ifndef TAGI_TESTS_DATA_TEMP_DIR_H_
#define TAGI_TESTS_DATA_TEMP_DIR_H_

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace tagi::data::testing {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string name = std::string("tagi_data_test_") +
                             info->test_suite_name() + "_" + info->name() +
                             "_" + std::to_string(::getpid()) + "_" +
                             std::to_string(counter++);
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string Path(std::string_view file) const {
    return (path_ / file).string();
  }

  // Writes `contents` to `file` and returns its full path.
  std::string Write(std::string_view file, std::string_view contents) const {
    const std::string p = Path(file);
    std::ofstream out(p, std::ios::binary);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    return p;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace tagi::data::testing

#endif  // TAGI_TESTS_DATA_TEMP_DIR_H_
