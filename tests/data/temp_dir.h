// The data tests' temporary directory: the shared ScratchDir.
#ifndef TAGI_TESTS_DATA_TEMP_DIR_H_
#define TAGI_TESTS_DATA_TEMP_DIR_H_

#include "tests/testing/scratch_dir.h"

namespace tagi::data::testing {
using TempDir = ::tagi::testing::ScratchDir;
}  // namespace tagi::data::testing

#endif  // TAGI_TESTS_DATA_TEMP_DIR_H_
