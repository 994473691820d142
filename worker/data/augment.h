// Training-image augmentation: random crops of a zero-padded image and
// horizontal flips, as a pure function of (seed, epoch, sample index).
//
// The draws of one sample come from tagi::Rng seeded by
// DeriveSeed(DeriveSeed(seed, epoch), index), in the order: row offset, column
// offset (each uniform in [0, 2p]), flip (probability 1/2). They are always
// all drawn, whatever the options, so that the result depends on nothing but
// those three numbers: not on the rank, the sample's position in a batch, the
// thread or a resume.
//
// What the image becomes (p = random_crop_padding; crop first, then flip, as
// torchvision's RandomCrop followed by RandomHorizontalFlip):
//   cropped(c, y, x) = src(c, y + dy - p, x + dx - p), 0 where that falls
//                      outside the image;
//   out(c, y, x)     = cropped(c, y, W - 1 - x) when flipped, else cropped.
// The padded cells are 0 in the space the image is given in. The trainer
// augments the already standardised rows (the data set is normalised once,
// at load), so a padded cell holds the channel's mean: like the zero padding
// of a convolution, it adds nothing to the first layer's sums (a zero mean
// with zero variance), and the augmentation needs no standardizer.
// torchvision pads the raw pixels with 0 before Normalize, i.e. with black,
// (0 - mean_c) / std_c after it (about -1.9 for CIFAR-10); we chose not to
// copy that for the two reasons above. The difference is in the border
// only, at most p rows and p columns of each image. (With standardize
// false the rows are raw [0, 1] pixels and the padding is black, as
// torchvision's.)
//
// Nothing here allocates; thread-safe (no state).
#ifndef TAGI_WORKER_DATA_AUGMENT_H_
#define TAGI_WORKER_DATA_AUGMENT_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "tagi/v1/job.pb.h"

namespace tagi::data {

// The shape of one sample, (C, H, W), stored CHW row-major.
struct ImageShape {
  size_t channels = 0;
  size_t height = 0;
  size_t width = 0;
  size_t size() const { return channels * height * width; }
};

// One sample's draws.
struct AugmentDraw {
  uint32_t dy = 0;  // row offset of the crop in the padded image, 0..2p
  uint32_t dx = 0;  // column offset, 0..2p
  bool flip = false;
};

// Whether `a` changes any image (crop padding > 0 or flip set).
bool AugmentsImages(const tagi::v1::Augmentation& a);

// The draws of sample `index` in `epoch` (see above). With p = 0 the
// offsets are 0; without horizontal_flip, flip is false.
AugmentDraw DrawAugmentation(const tagi::v1::Augmentation& a, uint64_t seed, uint64_t epoch,
                             uint64_t index);

// Writes `src` cropped and flipped as `draw` says into `dst`.
// REQUIRES: src.size() == dst.size() == shape.size(); they do not overlap;
//           draw.dy, draw.dx <= 2 * padding.
void ApplyAugmentation(const AugmentDraw& draw, uint32_t padding, const ImageShape& shape,
                       std::span<const float> src, std::span<float> dst);

// DrawAugmentation then ApplyAugmentation.
// REQUIRES: as ApplyAugmentation.
void AugmentImage(const tagi::v1::Augmentation& a, const ImageShape& shape, uint64_t seed,
                  uint64_t epoch, uint64_t index, std::span<const float> src, std::span<float> dst);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_AUGMENT_H_
