#include "worker/data/augment.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "tests/common/allocation_probe.h"

namespace tagi::data {
namespace {

using ::tagi::v1::Augmentation;

constexpr uint64_t kSeed = 77;

Augmentation Options(uint32_t padding, bool flip) {
  Augmentation a;
  a.set_random_crop_padding(padding);
  a.set_horizontal_flip(flip);
  return a;
}

// An image whose every cell is distinct and non-zero: 1 + its CHW index.
std::vector<float> Numbered(const ImageShape& shape) {
  std::vector<float> v(shape.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i + 1);
  return v;
}

// The definition in augment.h, cell by cell.
float Expected(const std::vector<float>& src, const ImageShape& s, const AugmentDraw& d, uint32_t p,
               size_t c, size_t y, size_t x) {
  const ptrdiff_t cx = d.flip ? static_cast<ptrdiff_t>(s.width - 1 - x) : static_cast<ptrdiff_t>(x);
  const ptrdiff_t sy = static_cast<ptrdiff_t>(y) + d.dy - p;
  const ptrdiff_t sx = cx + d.dx - p;
  if (sy < 0 || sx < 0 || sy >= static_cast<ptrdiff_t>(s.height) ||
      sx >= static_cast<ptrdiff_t>(s.width)) {
    return 0.0f;
  }
  return src[(c * s.height + static_cast<size_t>(sy)) * s.width + static_cast<size_t>(sx)];
}

std::vector<float> Apply(const AugmentDraw& d, uint32_t p, const ImageShape& s,
                         const std::vector<float>& src) {
  std::vector<float> out(s.size(), -1.0f);
  ApplyAugmentation(d, p, s, src, out);
  return out;
}

TEST(Augment, EveryDrawMatchesTheDefinitionOnANonSquareImage) {
  const ImageShape shape{2, 3, 5};
  const std::vector<float> src = Numbered(shape);
  for (uint32_t p : {0u, 1u, 2u, 4u}) {
    for (uint32_t dy = 0; dy <= 2 * p; ++dy) {
      for (uint32_t dx = 0; dx <= 2 * p; ++dx) {
        for (bool flip : {false, true}) {
          const AugmentDraw d{dy, dx, flip};
          const std::vector<float> out = Apply(d, p, shape, src);
          for (size_t c = 0; c < 2; ++c) {
            for (size_t y = 0; y < 3; ++y) {
              for (size_t x = 0; x < 5; ++x) {
                ASSERT_EQ(out[(c * 3 + y) * 5 + x], Expected(src, shape, d, p, c, y, x))
                    << "p " << p << " dy " << dy << " dx " << dx << " flip " << flip << " at (" << c
                    << ", " << y << ", " << x << ")";
              }
            }
          }
        }
      }
    }
  }
}

TEST(Augment, PaddingReadsZerosAndTheCentreOffsetIsTheIdentity) {
  const ImageShape shape{1, 4, 4};
  const std::vector<float> src = Numbered(shape);
  // Offset (0, 0) with p = 2: the window's top two rows and left two
  // columns are padding, the rest is the image's top-left 2x2.
  const std::vector<float> corner = Apply({0, 0, false}, 2, shape, src);
  EXPECT_EQ(corner, (std::vector<float>{0, 0, 0, 0,  //
                                        0, 0, 0, 0,  //
                                        0, 0, 1, 2,  //
                                        0, 0, 5, 6}));
  // Offset (4, 3): bottom-right, shifted two rows down and one column right.
  const std::vector<float> other = Apply({4, 3, false}, 2, shape, src);
  EXPECT_EQ(other, (std::vector<float>{10, 11, 12, 0,  //
                                       14, 15, 16, 0,  //
                                       0, 0, 0, 0,     //
                                       0, 0, 0, 0}));
  EXPECT_EQ(Apply({2, 2, false}, 2, shape, src), src);
}

TEST(Augment, FlipIsAMirrorOfEachRow) {
  const ImageShape shape{3, 2, 4};
  const std::vector<float> src = Numbered(shape);
  const std::vector<float> out = Apply({0, 0, true}, 0, shape, src);
  for (size_t row = 0; row < 3 * 2; ++row) {
    for (size_t x = 0; x < 4; ++x) EXPECT_EQ(out[row * 4 + x], src[row * 4 + 3 - x]);
  }
  EXPECT_EQ(Apply({0, 0, true}, 0, shape, out), src) << "two flips are the identity";
}

TEST(Augment, NoPaddingAndNoFlipIsTheIdentity) {
  const ImageShape shape{3, 8, 8};
  const std::vector<float> src = Numbered(shape);
  const Augmentation none;
  EXPECT_FALSE(AugmentsImages(none));
  EXPECT_TRUE(AugmentsImages(Options(1, false)));
  EXPECT_TRUE(AugmentsImages(Options(0, true)));
  std::vector<float> out(shape.size());
  for (uint64_t index = 0; index < 100; ++index) {
    AugmentImage(none, shape, kSeed, index % 3, index, src, out);
    ASSERT_EQ(out, src) << "index " << index;
  }
}

TEST(Augment, DeterministicInSeedEpochAndIndexAndNothingElse) {
  const ImageShape shape{3, 6, 6};
  const std::vector<float> src = Numbered(shape);
  const Augmentation a = Options(2, true);
  std::vector<float> first(shape.size());
  std::vector<float> again(shape.size());
  AugmentImage(a, shape, kSeed, 5, 1234, src, first);
  // Other samples in between (as another batch position or thread would).
  for (uint64_t other = 0; other < 10; ++other) AugmentImage(a, shape, kSeed, 5, other, src, again);
  AugmentImage(a, shape, kSeed, 5, 1234, src, again);
  EXPECT_EQ(first, again);
  const AugmentDraw d = DrawAugmentation(a, kSeed, 5, 1234);
  EXPECT_EQ(first, Apply(d, 2, shape, src));
}

TEST(Augment, DrawsDifferAcrossEpochsIndicesAndSeeds) {
  const Augmentation a = Options(4, true);
  auto key = [](const AugmentDraw& d) { return d.dy * 1000 + d.dx * 10 + (d.flip ? 1 : 0); };
  std::set<uint32_t> over_epochs, over_indices, over_seeds;
  for (uint64_t i = 0; i < 20; ++i) {
    over_epochs.insert(key(DrawAugmentation(a, kSeed, i, 7)));
    over_indices.insert(key(DrawAugmentation(a, kSeed, 3, i)));
    over_seeds.insert(key(DrawAugmentation(a, kSeed + i, 3, 7)));
  }
  // 162 equally likely draws: 20 of them are nowhere near all equal.
  EXPECT_GE(over_epochs.size(), 10u);
  EXPECT_GE(over_indices.size(), 10u);
  EXPECT_GE(over_seeds.size(), 10u);
}

TEST(Augment, CropOffsetsCoverTheRangeUniformlyAndFlipsHalfTheTime) {
  constexpr uint32_t kPad = 3;
  constexpr int kDraws = 14000;
  const Augmentation a = Options(kPad, true);
  std::array<int, 2 * kPad + 1> rows{}, cols{};
  int flips = 0;
  for (int i = 0; i < kDraws; ++i) {
    const AugmentDraw d = DrawAugmentation(a, kSeed, 2, static_cast<uint64_t>(i));
    ASSERT_LE(d.dy, 2 * kPad);
    ASSERT_LE(d.dx, 2 * kPad);
    ++rows[d.dy];
    ++cols[d.dx];
    flips += d.flip ? 1 : 0;
  }
  // Each offset has probability 1/7: 2000 expected, sd about 41.
  for (size_t k = 0; k < rows.size(); ++k) {
    EXPECT_NEAR(rows[k], kDraws / 7, 250) << "row offset " << k;
    EXPECT_NEAR(cols[k], kDraws / 7, 250) << "column offset " << k;
  }
  EXPECT_NEAR(flips, kDraws / 2, 400);  // sd about 59
}

TEST(Augment, OnlyTheAskedTransformsAreDrawn) {
  for (uint64_t i = 0; i < 200; ++i) {
    const AugmentDraw crop_only = DrawAugmentation(Options(2, false), kSeed, 0, i);
    ASSERT_FALSE(crop_only.flip);
    const AugmentDraw flip_only = DrawAugmentation(Options(0, true), kSeed, 0, i);
    ASSERT_EQ(flip_only.dy, 0u);
    ASSERT_EQ(flip_only.dx, 0u);
    // The coin is the same whether or not a crop is asked.
    ASSERT_EQ(flip_only.flip, DrawAugmentation(Options(2, true), kSeed, 0, i).flip);
  }
}

TEST(Augment, DoesNotAllocate) {
  const ImageShape shape{3, 32, 32};
  const std::vector<float> src = Numbered(shape);
  std::vector<float> out(shape.size());
  const Augmentation a = Options(4, true);
  test::AllocationProbe probe;
  for (uint64_t i = 0; i < 50; ++i) AugmentImage(a, shape, kSeed, 1, i, src, out);
  EXPECT_EQ(probe.largest(), 0u);
}

}  // namespace
}  // namespace tagi::data
