// Fuzzes image decoding (DecodeImage: libpng and libjpeg through our error
// handlers) and fitting (FitImage), as an IMAGE_FOLDER job reads each file.
//
// The first byte picks the options (bit 0: 3 channels, else 1; bit 1:
// centre crop, else resize); the rest is the file. Besides the sanitizers,
// it checks that a refusal is InvalidArgument with a message, that a decoded
// image is within the caps and holds exactly its pixels, and that the fitted
// values lie in [0, 1].
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_support.h"
#include "worker/data/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint32_t channels = (data[0] & 1u) ? 3 : 1;
  const auto fit = (data[0] & 2u) ? tagi::v1::DataSpec::CENTER_CROP : tagi::v1::DataSpec::RESIZE;
  auto image = tagi::data::DecodeImage({data + 1, size - 1}, "f.img");
  if (!image.ok()) {
    FUZZ_CHECK(image.status().code() == absl::StatusCode::kInvalidArgument &&
                   !image.status().message().empty(),
               "refused with %s", image.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(image->width >= 1 && image->height >= 1 && image->width <= tagi::data::kMaxImageSide &&
                 image->height <= tagi::data::kMaxImageSide,
             "image of %ux%u", image->width, image->height);
  FUZZ_CHECK(image->channels == 1 || image->channels == 3, "%u channels", image->channels);
  FUZZ_CHECK(image->pixels.size() == size_t{image->width} * image->height * image->channels,
             "pixel count");
  for (float v : tagi::data::FitImage(*image, channels, 5, 7, fit)) {
    FUZZ_CHECK(v >= 0.0f && v <= 1.0f, "fitted value %g", v);
  }
  return 0;
}
