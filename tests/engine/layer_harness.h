// Drives one CPU layer on buffers a test owns (HiddenState boundaries,
// parameter vectors), building the LayerIo the Model would give it, so
// that a layer's arithmetic is checked on hand-set numbers.
#ifndef TAGI_TESTS_ENGINE_LAYER_HARNESS_H_
#define TAGI_TESTS_ENGINE_LAYER_HARNESS_H_

#include <vector>

#include "worker/engine/gaussian.h"
#include "worker/engine/layer.h"
#include "worker/engine/linear.h"

namespace tagi::engine {

// Two equally sized buffers a test owns (means, variances).
class GaussianTensor {
 public:
  GaussianTensor() = default;
  explicit GaussianTensor(size_t size) { Resize(size); }

  void Resize(size_t size) {
    mu_.assign(size, 0.0f);
    var_.assign(size, 0.0f);
  }
  size_t size() const { return mu_.size(); }
  float* mu() { return mu_.data(); }
  float* var() { return var_.data(); }
  const float* mu() const { return mu_.data(); }
  const float* var() const { return var_.data(); }
  GaussianView view() { return {mu_.data(), var_.data()}; }
  ConstGaussianView view() const { return {mu_.data(), var_.data()}; }

 private:
  std::vector<float> mu_;
  std::vector<float> var_;
};

// A test-owned layer boundary: [batch][width] units plus the producing activation's
// jcb. `has_jcb` is false where the producer is a LINEAR layer or the input
// (jcb = 1 everywhere, not stored).
struct HiddenState {
  size_t width = 0;
  GaussianTensor units;
  std::vector<float> jcb;
  bool has_jcb = false;

  void Reserve(size_t max_batch) {
    units.Resize(max_batch * width);
    if (has_jcb) jcb.assign(max_batch * width, 1.0f);
  }
};


// Views of one LINEAR layer's parameters (or deltas): weights then biases.
struct LinearParams {
  GaussianView w;  // [out][in]
  GaussianView b;  // [out]
};

class LinearUnderTest {
 public:
  LinearUnderTest(size_t in, size_t out) : in_(in), out_(out), layer_(in, out) {}

  void Reserve(size_t max_batch) {
    derived_.assign(2 * in_ * out_, 0.0f);
    scratch_.assign(max_batch * in_, 0.0f);
  }
  void Bind(LinearParams params, LinearParams deltas) {
    p_ = params;
    d_ = deltas;
  }
  void set_input_variance_zero(bool zero) { input_is_data_ = zero; }
  void RefreshDerived() { layer_.Refresh(Io(0)); }

  void Forward(const HiddenState& in, HiddenState& out, size_t batch) {
    LayerIo io = Io(batch);
    io.in = in.units.view();
    io.out = out.units.view();
    layer_.Forward(io, Mode::kTrain);
  }
  void Backward(const HiddenState& in, const HiddenState& /*out*/, ConstGaussianView delta_out,
                GaussianView delta_in, size_t batch, bool need_input_delta) {
    LayerIo io = Io(batch);
    io.in = in.units.view();
    io.delta_out = delta_out;
    if (need_input_delta) io.delta_in = delta_in;
    layer_.Backward(io);
  }
  void ApplyStep(float cap_factor, float variance_floor) {
    layer_.ApplyStep(Io(0), 1.0f / cap_factor, variance_floor);
  }

 private:
  LayerIo Io(size_t batch) {
    LayerIo io;
    io.batch = batch;
    io.input_is_data = input_is_data_;
    io.num_blocks = 2;
    io.params = {p_.w, p_.b};
    io.deltas = {d_.w, d_.b};
    io.block_size = {in_ * out_, out_};
    io.derived = derived_.data();
    io.scratch = scratch_.data();
    return io;
  }

  size_t in_;
  size_t out_;
  Linear layer_;
  bool input_is_data_ = false;
  LinearParams p_;
  LinearParams d_;
  std::vector<float> derived_;
  std::vector<float> scratch_;
};

// An activation layer on test-owned boundaries (the output's jcb included).
class ActivationUnderTest {
 public:
  ActivationUnderTest(Layer& layer) : layer_(layer) {}
  void Forward(const HiddenState& in, HiddenState& out, size_t batch) {
    LayerIo io;
    io.batch = batch;
    io.in = in.units.view();
    io.out = out.units.view();
    io.out_jcb = out.jcb.data();
    layer_.Forward(io, Mode::kTrain);
  }
  void Backward(const HiddenState& /*in*/, HiddenState& out, ConstGaussianView delta_out,
                GaussianView delta_in, size_t batch, bool need_input_delta) {
    LayerIo io;
    io.batch = batch;
    io.out_jcb = out.jcb.data();
    io.delta_out = delta_out;
    if (need_input_delta) io.delta_in = delta_in;
    layer_.Backward(io);
  }

 private:
  Layer& layer_;
};

}  // namespace tagi::engine

#endif  // TAGI_TESTS_ENGINE_LAYER_HARNESS_H_
