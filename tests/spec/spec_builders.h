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
inline Architecture Regression(Shape input, std::vector<LayerSpec> layers) {
  Architecture a;
  a.input = input;
  a.layers = std::move(layers);
  a.head = {HeadKind::kRegression, 0};
  return a;
}

}  // namespace tagi::spec::testing

#endif  // TAGI_TESTS_SPEC_SPEC_BUILDERS_H_
