// Writes the binary seed inputs of tests/fuzz/corpus/ with the project's own
// encoders, so that the seeds are real files of the current formats:
//   build-fuzz/bin/fuzz_seeds tests/fuzz/corpus
// The JSON seeds of job_spec are written by hand (examples/ and variants);
// everything here is deterministic, so rerunning changes nothing.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/snapshot.h"
#include "tests/data/data_files.h"
#include "worker/data/image.h"
#include "worker/engine/model_file.h"

namespace {

namespace fs = std::filesystem;
using tagi::engine::Architecture;
using tagi::engine::HeadKind;
using tagi::engine::LayerKind;

void Write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
  std::printf("%s: %zu bytes\n", path.c_str(), bytes.size());
}

std::vector<float> Parameters(const Architecture& arch) {
  std::vector<float> p(2 * arch.num_parameters());
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = i < p.size() / 2 ? 0.25f * static_cast<float>(i) - 1.0f : 0.01f;
  }
  return p;
}

void ModelFiles(const fs::path& dir) {
  const Architecture regression{{2, 1, 1}, {{tagi::v1::Layer::LINEAR, 2, 3, 0.0f},
                                 {tagi::v1::Layer::LEAKY_RELU, 0, 0, 0.1f},
                                 {tagi::v1::Layer::LINEAR, 3, 1, 0.0f}},
                                {HeadKind::kRegression, 0}};
  Write(dir / "regression",
        tagi::engine::EncodeModelFile(regression, {{0.5f, -1.0f}, {2.0f, 0.25f}, {3.0f}, {1.5f}},
                                      Parameters(regression)));
  const Architecture hsm{{4, 1, 1}, {{tagi::v1::Layer::LINEAR, 4, 2, 0.0f},
                          {tagi::v1::Layer::MIXTURE_RELU, 0, 0, 0.0f},
                          {tagi::v1::Layer::LINEAR, 2, 3, 0.0f}},
                         {HeadKind::kClassification, 3}};
  Write(dir / "hsm_unstandardised", tagi::engine::EncodeModelFile(hsm, {}, Parameters(hsm)));
  // An image network with state (running statistics): conv, batch norm,
  // pools, layer norm, a residual block, a flat batch norm.
  Architecture cnn;
  cnn.input = {1, 5, 7};
  tagi::spec::LayerSpec conv;
  conv.kind = tagi::v1::Layer::CONV2D;
  conv.in = 1;
  conv.out = 2;
  conv.kernel = 3;
  conv.stride = 1;
  conv.padding = 1;
  conv.padding_type = tagi::v1::Layer::SYMMETRIC;
  conv.bias = true;
  tagi::spec::LayerSpec bn;
  bn.kind = tagi::v1::Layer::BATCH_NORM;
  bn.eps = 1e-5f;
  bn.momentum = 0.9f;
  bn.bias = true;
  tagi::spec::LayerSpec ln = bn;
  ln.kind = tagi::v1::Layer::LAYER_NORM;
  ln.momentum = 0.0f;
  ln.bias = false;
  tagi::spec::LayerSpec pool;
  pool.kind = tagi::v1::Layer::MAX_POOL2D;
  pool.kernel = 2;
  pool.stride = 2;
  pool.padding = 1;
  pool.padding_type = tagi::v1::Layer::BOTTOM_RIGHT;
  tagi::spec::LayerSpec avg = pool;
  avg.kind = tagi::v1::Layer::AVG_POOL2D;
  avg.padding = 0;
  avg.padding_type = tagi::v1::Layer::PADDING_UNSPECIFIED;
  avg.kernel = 1;
  avg.stride = 1;
  tagi::spec::LayerSpec block;
  block.kind = tagi::v1::Layer::RESIDUAL;
  block.main = {ln, avg};
  cnn.layers = {conv, {tagi::v1::Layer::RELU, 0, 0, 0.0f}, bn, pool, block,
                {tagi::v1::Layer::LINEAR, 24, 4, 0.0f}, bn,
                {tagi::v1::Layer::LINEAR, 4, 3, 0.0f}};
  cnn.head = {HeadKind::kClassification, 3};
  std::vector<float> state(cnn.num_state(), 0.5f);
  Write(dir / "cnn_with_state",
        tagi::engine::EncodeModelFile(cnn, {}, Parameters(cnn), state));
}

void Snapshots(const fs::path& dir) {
  tagi::Snapshot s;
  s.job_id = "job-7";
  s.generation = 2;
  s.epoch = 1;
  s.step = 3;
  s.global_step = 13;
  s.rng_state = {1, 2, 3, 0x9e3779b97f4a7c15ULL};
  s.sigma_v = 0.5f;
  s.parameters = {0.5f, -0.25f, 1.0f, 0.01f, 0.02f, 0.03f};
  s.architecture = "2-1 regression";
  Write(dir / "small.snap", tagi::EncodeSnapshot(s));
  s.job_id.clear();
  s.parameters.clear();
  s.architecture.clear();
  Write(dir / "empty_fields.snap", tagi::EncodeSnapshot(s));
}

std::string Idx(const std::vector<uint32_t>& dims, size_t seed) {
  std::string out = {0, 0, 8, static_cast<char>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(d >> shift));
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((i * 37 + seed) % 10));
  return out;
}

std::string Gzip(const std::string& raw) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // 16: gzip wrapper
  std::string out(deflateBound(&z, raw.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void IdxFiles(const fs::path& dir) {
  const std::string sep = "IDXLABELS";
  Write(dir / "images_labels", Idx({3, 2, 2}, 0) + sep + Idx({3}, 1));
  Write(dir / "vectors_labels", Idx({4, 3}, 2) + sep + Idx({4}, 3));
  Write(dir / "gzip_images_labels", Gzip(Idx({2, 4, 4}, 4)) + sep + Gzip(Idx({2}, 5)));
  Write(dir / "images_only", Idx({2, 3, 3}, 6));
}

// The first byte holds the options (see csv_fuzz.cc).
void CsvFiles(const fs::path& dir) {
  auto options = [](int targets, bool header, int limit) {
    return std::string(1, static_cast<char>((targets - 1) | (header ? 4 : 0) | (limit << 3)));
  };
  Write(dir / "plain", options(1, false, 0) + "1,2,3\n4, 5 ,\t6\n-7.5,8e1,+9\n");
  Write(dir / "header_crlf", options(1, true, 0) + "x,y\r\n1.5,2\r\n3,4\r\n\r\n");
  Write(dir / "missing_targets", options(2, false, 0) + "1,,nan\n2,NaN,3\n4,5e-3,6\n");
  Write(dir / "limit", options(1, false, 2) + "1,2\n3,4\nbad,row\n");
}

void StorePrograms(const fs::path& dir) {
  // Any bytes are a program; these give the fuzzer printable keys to start from.
  Write(dir / "keys", std::string("rank/0\0addr/1\0job/job-1/gen/0/x\0count\0", 37) +
                          std::string(16, '\x01') + std::string(8, '\x03'));
  const char ascii[] =
      "\x05job-1\0rank0=127.0.0.1:4000;rank1=127.0.0.1:4001;counter+1;wait rank0 rank1;job/";
  Write(dir / "ascii", std::string(ascii, sizeof(ascii) - 1));
}

// NPY seeds: the first byte is npy_fuzz's options.
void NpyFiles(const fs::path& dir) {
  using tagi::data::testing::Npy;
  using tagi::data::testing::Raw;
  Write(dir / "f4_regression", std::string(1, '\x00') +
                                   Npy("<f4", {3, 2}, Raw(std::vector<float>{1, 2, 3, 4, 5, 6})));
  Write(dir / "u1_images_nhwc", std::string(1, '\x03') + Npy("|u1", {2, 2, 2, 1}, "abcdefgh"));
  Write(dir / "i8_labels", std::string(1, '\x06') +
                               Npy("<i8", {3}, Raw(std::vector<int64_t>{0, 1, 2})));
  Write(dir / "f8_3d", std::string(1, '\x02') + Npy("<f8", {1, 2, 2}, std::string(32, '\0')));
}

void NpzFiles(const fs::path& dir) {
  using tagi::data::testing::Npy;
  using tagi::data::testing::Raw;
  using tagi::data::testing::Zip;
  const std::string x = Npy("<f4", {2, 2}, Raw(std::vector<float>{1, 2, 3, 4}));
  const std::string y = Npy("<i8", {2}, Raw(std::vector<int64_t>{0, 1}));
  Write(dir / "stored", Zip({{"x_train.npy", x}, {"y_train.npy", y}}, false));
  Write(dir / "deflated",
        Zip({{"x_train.npy", x}, {"y_train.npy", y}, {"x_test.npy", x}, {"y_test.npy", y}}, true));
}

// Image seeds: the first byte is image_fuzz's options.
void ImageFiles(const fs::path& dir) {
  tagi::data::Image grey{6, 4, 1, {}};
  for (int i = 0; i < 24; ++i) grey.pixels.push_back(static_cast<uint8_t>(10 * i));
  tagi::data::Image rgb{5, 5, 3, {}};
  for (int i = 0; i < 75; ++i) rgb.pixels.push_back(static_cast<uint8_t>(3 * i));
  Write(dir / "grey_png", std::string(1, '\x00') + tagi::data::EncodePng(grey));
  Write(dir / "rgb_png_crop", std::string(1, '\x03') + tagi::data::EncodePng(rgb));
  Write(dir / "grey_jpeg", std::string(1, '\x01') + tagi::data::EncodeJpeg(grey, 80));
  Write(dir / "rgb_jpeg_crop", std::string(1, '\x02') + tagi::data::EncodeJpeg(rgb, 60));
}

// CSV label seeds: the first byte is csv_label_fuzz's options.
void CsvLabelFiles(const fs::path& dir) {
  Write(dir / "named", std::string(1, '\x33') + "a,y,b\n1,2,3\n4,0,6\n");
  Write(dir / "index", std::string(1, '\x24') + "0.5,1\n-2,0\n");
  Write(dir / "quoted_crlf", std::string(1, '\x13') + "\"x\",\"y\"\r\n1,1\r\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  ModelFiles(root / "model_file");
  Snapshots(root / "snapshot");
  IdxFiles(root / "idx");
  CsvFiles(root / "csv");
  StorePrograms(root / "store");
  NpyFiles(root / "npy");
  NpzFiles(root / "npz");
  ImageFiles(root / "image");
  CsvLabelFiles(root / "csv_label");
  return 0;
}
