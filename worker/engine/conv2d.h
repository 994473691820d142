// Conv2d: the TAGI convolution (docs/maths.md section 10) on the CPU.
//
// A TAGI convolution is seven ordinary ones: forward mu_w*mu_a,
// (mu_w^2 + var_w)*var_a and var_w*mu_a^2; backward-data with mu_w and
// mu_w^2; backward-weights with mu_a and mu_a^2. Each is one SGEMM per
// chunk of samples (spec::ConvChunk: enough that the products are wide)
// over the chunk's im2col columns ([in * k^2][chunk * output positions],
// zeros where a window reads padding, so padding adds nothing to any sum)
// in the shared workspace; backward-data scatters its columns back with
// col2im. Where oneDNN has direct kernels for the shape on this CPU, the
// products run as direct convolutions instead (direct_conv.h).
// Blocks: weights [out][in][k][k], then biases [out] when bias is on.
// Derived: mu_w^2 then mu_w^2 + var_w. No allocation.
#ifndef TAGI_WORKER_ENGINE_CONV2D_H_
#define TAGI_WORKER_ENGINE_CONV2D_H_

#include <memory>

#include "spec/plan.h"
#include "worker/engine/layer.h"

namespace tagi::engine {

// The geometry of one windowed layer (convolutions and pools).
struct WindowGeometry {
  size_t channels = 0;  // input
  size_t height = 0;
  size_t width = 0;
  size_t out_height = 0;
  size_t out_width = 0;
  size_t kernel = 0;
  size_t stride = 0;
  size_t offset = 0;  // rows/columns of padding before the image
  static WindowGeometry Of(const spec::PlannedLayer& planned);
  size_t in_size() const { return height * width; }
  size_t out_size() const { return out_height * out_width; }
};

// col[((c k + i) k + j) ld + y out_width + x] = image[c][y s + i - q][x s + j - q],
// 0 where that reads padding. `image` is one sample [channels][height][width];
// `ld` (>= out_height * out_width) is the row stride of col, so that several
// samples' columns can sit side by side.
void Im2Col(const WindowGeometry& g, const float* image, float* col, size_t ld);
// The adjoint: image[c][r][t] = the sum of the col entries that read it
// (overwrites `image`).
void Col2Im(const WindowGeometry& g, const float* col, size_t ld, float* image);

class DirectConv;

// How the forward and backward-data products run: oneDNN's direct kernels
// where it has one for the shape (the default), or im2col + SGEMM always.
enum class ConvProducts { kDirect, kIm2col };

class Conv2d final : public Layer {
 public:
  explicit Conv2d(const spec::PlannedLayer& planned,
                  ConvProducts products = ConvProducts::kDirect);
  ~Conv2d() override;
  // True when oneDNN's direct kernels run this layer's seven products.
  bool direct() const;

  void Forward(const LayerIo& io, Mode mode) override;
  void Backward(const LayerIo& io) override;
  void Refresh(const LayerIo& io) override;

 private:
  void Im2colBackward(const LayerIo& io);
  size_t weights() const { return out_ * rows_; }
  WindowGeometry g_;
  size_t out_;   // output channels
  size_t rows_;  // in * k^2
  bool bias_;
  std::unique_ptr<DirectConv> direct_;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_CONV2D_H_
