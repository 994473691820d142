#include "worker/data/image.h"

// jpeglib.h needs FILE and size_t declared before it.
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tagi::data {
namespace {

using tagi::v1::DataSpec;

bool IsPng(std::span<const uint8_t> b) {
  static constexpr uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), kSig, 8) == 0;
}
bool IsJpeg(std::span<const uint8_t> b) {
  return b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff;
}

absl::Status Undecodable(const std::string& name, const std::string& kind,
                         const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": undecodable ", kind, " image: ", reason));
}

absl::Status CheckSize(const std::string& name, uint64_t w, uint64_t h) {
  if (w == 0 || h == 0 || w > kMaxImageSide || h > kMaxImageSide || w * h > kMaxImagePixels) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: image is %dx%d pixels; at most %dx%d and %d pixels are decoded", name,
                        w, h, kMaxImageSide, kMaxImageSide, kMaxImagePixels));
  }
  return absl::OkStatus();
}

absl::StatusOr<Image> DecodePng(std::span<const uint8_t> bytes, const std::string& name) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  struct Free {
    png_image* p;
    ~Free() { png_image_free(p); }
  } free_on_exit{&png};
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) {
    return Undecodable(name, "PNG", png.message);
  }
  if (auto st = CheckSize(name, png.width, png.height); !st.ok()) return st;
  const bool colour = (png.format & PNG_FORMAT_FLAG_COLOR) != 0;
  png.format = colour ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  Image out;
  out.width = png.width;
  out.height = png.height;
  out.channels = colour ? 3 : 1;
  out.pixels.resize(PNG_IMAGE_SIZE(png));
  png_color black{0, 0, 0};
  if (!png_image_finish_read(&png, &black, out.pixels.data(), 0, nullptr)) {
    return Undecodable(name, "PNG", png.message);
  }
  return out;
}

// libjpeg's failures jump back here instead of exit()ing.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void JpegFail(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// A warning (level -1: corrupt or truncated data) is a failure too; trace
// messages (level >= 0) are ignored.
void JpegMessage(j_common_ptr cinfo, int level) {
  if (level < 0) JpegFail(cinfo);
}

void JpegProgress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxJpegScans) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message), "more than %d scans", kMaxJpegScans);
    std::longjmp(err->jump, 1);
  }
}

// The decoder's state: plain C structs only, so that a longjmp out of
// libjpeg skips no destructor.
struct JpegDecoder {
  jpeg_decompress_struct cinfo;
  JpegError err;
  jpeg_progress_mgr progress;
};

// Each phase sets its own jump point; false when libjpeg failed (the
// reason in err.message).
bool JpegReadHeader(JpegDecoder* d, const uint8_t* data, size_t size) {
  if (setjmp(d->err.jump)) return false;
  jpeg_mem_src(&d->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d->cinfo, TRUE);
  return true;
}

bool JpegReadPixels(JpegDecoder* d, uint8_t* out, size_t row_bytes) {
  if (setjmp(d->err.jump)) return false;
  jpeg_start_decompress(&d->cinfo);
  while (d->cinfo.output_scanline < d->cinfo.output_height) {
    JSAMPROW row = out + d->cinfo.output_scanline * row_bytes;
    jpeg_read_scanlines(&d->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&d->cinfo);
  return true;
}

absl::StatusOr<Image> DecodeJpeg(std::span<const uint8_t> bytes, const std::string& name) {
  auto d = std::make_unique<JpegDecoder>();
  d->cinfo.err = jpeg_std_error(&d->err.mgr);
  d->err.mgr.error_exit = JpegFail;
  d->err.mgr.emit_message = JpegMessage;
  d->err.message[0] = '\0';
  jpeg_create_decompress(&d->cinfo);
  struct Destroy {
    jpeg_decompress_struct* c;
    ~Destroy() { jpeg_destroy_decompress(c); }
  } destroy{&d->cinfo};
  d->cinfo.mem->max_memory_to_use = kMaxJpegMemory;
  d->progress.progress_monitor = JpegProgress;
  d->cinfo.progress = &d->progress;
  if (!JpegReadHeader(d.get(), bytes.data(), bytes.size())) {
    return Undecodable(name, "JPEG", d->err.message);
  }
  if (auto st = CheckSize(name, d->cinfo.image_width, d->cinfo.image_height); !st.ok()) {
    return st;
  }
  const J_COLOR_SPACE space = d->cinfo.jpeg_color_space;
  if (space == JCS_GRAYSCALE) {
    d->cinfo.out_color_space = JCS_GRAYSCALE;
  } else if (space == JCS_YCbCr || space == JCS_RGB) {
    d->cinfo.out_color_space = JCS_RGB;
  } else {
    return Undecodable(name, "JPEG", "colour space is not greyscale, RGB or YCbCr (CMYK?)");
  }
  Image out;
  out.width = d->cinfo.image_width;
  out.height = d->cinfo.image_height;
  out.channels = space == JCS_GRAYSCALE ? 1 : 3;
  out.pixels.resize(size_t{out.width} * out.height * out.channels);
  if (!JpegReadPixels(d.get(), out.pixels.data(), size_t{out.width} * out.channels)) {
    return Undecodable(name, "JPEG", d->err.message);
  }
  return out;
}

// Bilinear sample of channel `c` at (y, x) in source pixels, clamped.
float Sample(const Image& im, uint32_t c, double y, double x) {
  y = std::clamp(y, 0.0, static_cast<double>(im.height - 1));
  x = std::clamp(x, 0.0, static_cast<double>(im.width - 1));
  const uint32_t y0 = static_cast<uint32_t>(y), x0 = static_cast<uint32_t>(x);
  const uint32_t y1 = std::min(y0 + 1, im.height - 1), x1 = std::min(x0 + 1, im.width - 1);
  const double fy = y - y0, fx = x - x0;
  auto at = [&](uint32_t yy, uint32_t xx) {
    return static_cast<double>(im.pixels[(size_t{yy} * im.width + xx) * im.channels + c]);
  };
  const double top = at(y0, x0) * (1 - fx) + at(y0, x1) * fx;
  const double bottom = at(y1, x0) * (1 - fx) + at(y1, x1) * fx;
  return static_cast<float>(top * (1 - fy) + bottom * fy);
}

}  // namespace

absl::StatusOr<Image> DecodeImage(std::span<const uint8_t> bytes, const std::string& name) {
  if (IsPng(bytes)) return DecodePng(bytes, name);
  if (IsJpeg(bytes)) return DecodeJpeg(bytes, name);
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": undecodable image: neither a PNG nor a JPEG signature"));
}

std::vector<float> FitImage(const Image& image, uint32_t channels, uint32_t height, uint32_t width,
                            DataSpec::ImageFit fit) {
  double sy = static_cast<double>(height) / image.height;
  double sx = static_cast<double>(width) / image.width;
  double oy = 0, ox = 0;  // crop offset, in target pixels
  if (fit == DataSpec::CENTER_CROP) {
    sy = sx = std::max(sy, sx);
    oy = (image.height * sy - height) / 2;
    ox = (image.width * sx - width) / 2;
  }
  const size_t plane = size_t{height} * width;
  std::vector<float> out(channels * plane);
  std::vector<float> rgb(image.channels);
  for (uint32_t y = 0; y < height; ++y) {
    const double src_y = (y + oy + 0.5) / sy - 0.5;
    for (uint32_t x = 0; x < width; ++x) {
      const double src_x = (x + ox + 0.5) / sx - 0.5;
      for (uint32_t c = 0; c < image.channels; ++c) rgb[c] = Sample(image, c, src_y, src_x);
      const size_t at = size_t{y} * width + x;
      if (channels == image.channels) {
        for (uint32_t c = 0; c < channels; ++c) out[c * plane + at] = rgb[c] / 255.0f;
      } else if (channels == 3) {  // grey to RGB
        for (uint32_t c = 0; c < 3; ++c) out[c * plane + at] = rgb[0] / 255.0f;
      } else {  // RGB to grey
        out[at] = (0.299f * rgb[0] + 0.587f * rgb[1] + 0.114f * rgb[2]) / 255.0f;
      }
    }
  }
  return out;
}

std::string EncodePng(const Image& image) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  png.width = image.width;
  png.height = image.height;
  png.format = image.channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  png_alloc_size_t size = 0;
  if (!png_image_write_get_memory_size(png, size, 0, image.pixels.data(), 0, nullptr)) {
    return {};
  }
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&png, out.data(), &size, 0, image.pixels.data(), 0, nullptr)) {
    return {};
  }
  out.resize(size);
  return out;
}

namespace {

struct JpegEncoder {
  jpeg_compress_struct cinfo;
  JpegError err;
};

bool JpegWrite(JpegEncoder* e, const Image* image, int quality, unsigned char** buf,
               unsigned long* size) {
  if (setjmp(e->err.jump)) return false;
  jpeg_mem_dest(&e->cinfo, buf, size);
  e->cinfo.image_width = image->width;
  e->cinfo.image_height = image->height;
  e->cinfo.input_components = static_cast<int>(image->channels);
  e->cinfo.in_color_space = image->channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&e->cinfo);
  jpeg_set_quality(&e->cinfo, quality, TRUE);
  jpeg_start_compress(&e->cinfo, TRUE);
  const size_t row_bytes = size_t{image->width} * image->channels;
  while (e->cinfo.next_scanline < e->cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(image->pixels.data()) + e->cinfo.next_scanline * row_bytes;
    jpeg_write_scanlines(&e->cinfo, &row, 1);
  }
  jpeg_finish_compress(&e->cinfo);
  return true;
}

}  // namespace

std::string EncodeJpeg(const Image& image, int quality) {
  auto e = std::make_unique<JpegEncoder>();
  e->cinfo.err = jpeg_std_error(&e->err.mgr);
  e->err.mgr.error_exit = JpegFail;
  jpeg_create_compress(&e->cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const bool ok = JpegWrite(e.get(), &image, quality, &buf, &size);
  jpeg_destroy_compress(&e->cinfo);
  std::string out;
  if (ok && buf != nullptr) out.assign(reinterpret_cast<char*>(buf), size);
  std::free(buf);
  return out;
}

}  // namespace tagi::data
