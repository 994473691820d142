// The common tests' temporary directory: the shared ScratchDir.
#ifndef TAGI_TESTS_COMMON_TEMP_DIR_H_
#define TAGI_TESTS_COMMON_TEMP_DIR_H_

#include "tests/testing/scratch_dir.h"

namespace tagi::test {
using TempDir = ::tagi::testing::ScratchDir;
}  // namespace tagi::test

#endif  // TAGI_TESTS_COMMON_TEMP_DIR_H_
