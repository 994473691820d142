// Images: PNG and JPEG decoded with Debian's libpng and libjpeg, and fitted
// to a job's input shape.
//
// DecodeImage reads the header first and refuses an image wider or taller
// than kMaxImageSide or of more than kMaxImagePixels pixels before any
// pixel buffer is allocated. A corrupt or truncated file is an error, never
// an abort: libpng's simplified API reports its failures, and libjpeg's
// error and warning handlers jump back to the decoder (a warning, e.g.
// "premature end of data", counts as a failure); a progressive JPEG is
// limited to kMaxJpegScans scans and libjpeg to kMaxJpegMemory bytes.
// Errors are InvalidArgument naming `name` and libpng's / libjpeg's reason.
// Pure functions; thread-safe (each call owns its decoder).
#ifndef TAGI_WORKER_DATA_IMAGE_H_
#define TAGI_WORKER_DATA_IMAGE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tagi/v1/job.pb.h"

namespace tagi::data {

inline constexpr uint32_t kMaxImageSide = 16384;
inline constexpr uint64_t kMaxImagePixels = uint64_t{1} << 26;
inline constexpr int kMaxJpegScans = 256;
inline constexpr long kMaxJpegMemory = 512L << 20;

// 8-bit pixels, row-major, interleaved: channels is 1 (grey) or 3 (RGB).
struct Image {
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels
};

// PNG (any bit depth, palette, alpha composited on black) or JPEG
// (greyscale or colour), told apart by their magic bytes.
absl::StatusOr<Image> DecodeImage(std::span<const uint8_t> bytes, const std::string& name);

// The image brought to channels x height x width, CHW floats in [0, 1]:
// RESIZE (or unspecified) stretches it bilinearly; CENTER_CROP scales it so
// the short side fits and takes the centre. Grey becomes RGB by copying,
// RGB becomes grey by luma (0.299 R + 0.587 G + 0.114 B).
// REQUIRES: channels is 1 or 3, height and width >= 1, the image non-empty.
std::vector<float> FitImage(const Image& image, uint32_t channels, uint32_t height, uint32_t width,
                            tagi::v1::DataSpec::ImageFit fit);

// A PNG of the image (8-bit grey or RGB):
// what the tests and the fuzz seeds write.
std::string EncodePng(const Image& image);
// A baseline JPEG of the image at `quality` (1..100).
std::string EncodeJpeg(const Image& image, int quality);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_IMAGE_H_
