#include "worker/data/augment.h"

#include "absl/base/internal/raw_logging.h"
#include "common/rng.h"

namespace tagi::data {
namespace {

// One row of one channel: the source row `in` (nullptr: a padding row)
// shifted by `shift` columns (column x reads in[x + shift]) and optionally
// mirrored; cells that fall outside the source are 0.
void CopyRow(const float* in, ptrdiff_t shift, bool flip, size_t width, float* out) {
  const ptrdiff_t w = static_cast<ptrdiff_t>(width);
  for (ptrdiff_t x = 0; x < w; ++x) {
    const ptrdiff_t cx = flip ? w - 1 - x : x;  // column of the crop
    const ptrdiff_t sx = cx + shift;            // column of the source
    out[x] = (in != nullptr && sx >= 0 && sx < w) ? in[sx] : 0.0f;
  }
}

}  // namespace

bool AugmentsImages(const tagi::v1::Augmentation& a) {
  return a.random_crop_padding() > 0 || a.horizontal_flip();
}

AugmentDraw DrawAugmentation(const tagi::v1::Augmentation& a, uint64_t seed, uint64_t epoch,
                             uint64_t index) {
  Rng rng(DeriveSeed(DeriveSeed(seed, epoch), index));
  const uint64_t span = 2 * uint64_t{a.random_crop_padding()} + 1;
  AugmentDraw d;
  d.dy = static_cast<uint32_t>(rng.Below(span));
  d.dx = static_cast<uint32_t>(rng.Below(span));
  const bool heads = (rng.NextU64() >> 63) != 0;
  d.flip = a.horizontal_flip() && heads;
  return d;
}

void ApplyAugmentation(const AugmentDraw& draw, uint32_t padding, const ImageShape& shape,
                       std::span<const float> src, std::span<float> dst) {
  ABSL_RAW_CHECK(src.size() == shape.size() && dst.size() == shape.size(),
                 "ApplyAugmentation: src and dst must hold one image of the shape");
  ABSL_RAW_CHECK(draw.dy <= 2 * uint64_t{padding} && draw.dx <= 2 * uint64_t{padding},
                 "ApplyAugmentation: offset beyond 2 * padding");
  const ptrdiff_t h = static_cast<ptrdiff_t>(shape.height);
  const ptrdiff_t row_shift = static_cast<ptrdiff_t>(draw.dy) - padding;
  const ptrdiff_t col_shift = static_cast<ptrdiff_t>(draw.dx) - padding;
  const size_t plane = shape.height * shape.width;
  for (size_t c = 0; c < shape.channels; ++c) {
    const float* in = src.data() + c * plane;
    float* out = dst.data() + c * plane;
    for (ptrdiff_t y = 0; y < h; ++y) {
      const ptrdiff_t sy = y + row_shift;
      const float* row =
          (sy >= 0 && sy < h) ? in + sy * static_cast<ptrdiff_t>(shape.width) : nullptr;
      CopyRow(row, col_shift, draw.flip, shape.width,
              out + y * static_cast<ptrdiff_t>(shape.width));
    }
  }
}

void AugmentImage(const tagi::v1::Augmentation& a, const ImageShape& shape, uint64_t seed,
                  uint64_t epoch, uint64_t index, std::span<const float> src,
                  std::span<float> dst) {
  ApplyAugmentation(DrawAugmentation(a, seed, epoch, index), a.random_crop_padding(), shape, src,
                    dst);
}

}  // namespace tagi::data
