// Small builders of model specs for the tests.
#ifndef TAGI_TESTS_SPEC_SPEC_BUILDERS_H_
#define TAGI_TESTS_SPEC_SPEC_BUILDERS_H_

#include <vector>

#include "spec/network.h"

namespace tagi::spec::testing {

inline LayerSpec Lin(uint32_t in, uint32_t out) {
  LayerSpec l;
  l.kind = tagi::v1::Layer::LINEAR;
  l.in = in;
  l.out = out;
  return l;
}
inline LayerSpec Act(LayerKind kind = tagi::v1::Layer::RELU, float slope = 0.0f) {
  LayerSpec l;
  l.kind = kind;
  l.slope = slope;
  return l;
}
inline LayerSpec Res(std::vector<LayerSpec> main, std::vector<LayerSpec> shortcut = {}) {
  LayerSpec l;
  l.kind = tagi::v1::Layer::RESIDUAL;
  l.main = std::move(main);
  l.shortcut = std::move(shortcut);
  return l;
}
// A convolution; type SYMMETRIC unless given.
inline LayerSpec Conv(uint32_t in, uint32_t out, uint32_t k, uint32_t stride = 1,
                      uint32_t padding = 0, bool bias = true,
                      Padding type = tagi::v1::Layer::SYMMETRIC) {
  LayerSpec l;
  l.kind = tagi::v1::Layer::CONV2D;
  l.in = in;
  l.out = out;
  l.kernel = k;
  l.stride = stride;
  l.padding = padding;
  l.padding_type = type;
  l.bias = bias;
  return l;
}
inline LayerSpec Pool(LayerKind kind, uint32_t k, uint32_t stride, uint32_t padding = 0,
                      Padding type = tagi::v1::Layer::PADDING_UNSPECIFIED) {
  LayerSpec l;
  l.kind = kind;
  l.kernel = k;
  l.stride = stride;
  l.padding = padding;
  l.padding_type = type;
  return l;
}
inline LayerSpec Avg(uint32_t k, uint32_t stride, uint32_t padding = 0,
                     Padding type = tagi::v1::Layer::PADDING_UNSPECIFIED) {
  return Pool(tagi::v1::Layer::AVG_POOL2D, k, stride, padding, type);
}
inline LayerSpec Max(uint32_t k, uint32_t stride, uint32_t padding = 0,
                     Padding type = tagi::v1::Layer::PADDING_UNSPECIFIED) {
  return Pool(tagi::v1::Layer::MAX_POOL2D, k, stride, padding, type);
}
inline LayerSpec BN(bool bias = true, float momentum = 0.9f, float eps = 1e-5f) {
  LayerSpec l;
  l.kind = tagi::v1::Layer::BATCH_NORM;
  l.bias = bias;
  l.momentum = momentum;
  l.eps = eps;
  return l;
}
inline LayerSpec LN(bool bias = true, float eps = 1e-5f) {
  LayerSpec l;
  l.kind = tagi::v1::Layer::LAYER_NORM;
  l.bias = bias;
  l.eps = eps;
  return l;
}
inline Architecture Regression(Shape input, std::vector<LayerSpec> layers) {
  Architecture a;
  a.input = input;
  a.layers = std::move(layers);
  a.head = {HeadKind::kRegression, 0};
  return a;
}

}  // namespace tagi::spec::testing

#endif  // TAGI_TESTS_SPEC_SPEC_BUILDERS_H_
