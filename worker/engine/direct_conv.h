// DirectConv: a TAGI convolution's seven products (three forward, two
// backward-data, two backward-weights) as oneDNN direct convolutions on the
// CPU, instead of im2col columns and SGEMM.
//
// oneDNN's direct kernels read and write channel-blocked layouts, so each
// call reorders its operands from the engine's [sample][channel][row][col]
// layout into the workspace and its result back (weights included: they
// change every step). That is cheaper than im2col, which copies every
// input value k^2 times, and the kernels run nearer the core's peak than
// SGEMM does on im2col columns (docs/results.md).
//
// Same bits for any thread count: oneDNN runs on one thread per call
// (its OpenMP team is set to one in every calling thread); the model's
// thread team splits the batch into slices of a fixed number of samples
// (`slice`, from the layer's shape only), one slice per slot of the
// workspace, and a sample's outputs depend only on the primitive that ran
// its slice. A batch that is not a multiple of the slice ends in one-sample
// calls. The backward-weights products sum over the samples, so there the
// batch is cut by its size alone (pieces of 2^i samples: as many of the
// largest, up to about 2,048 output positions, as fit, then the binary
// digits of the rest), each piece's product added to the deltas in order,
// and the team's threads take the two products (mu and var) one each.
//
// Workspace: the blocked weights (three for the forward, two for backward-
// data), then per slot a blocked input and a blocked output; for backward-
// weights, per product a blocked input, output innovations and weight
// deltas of the largest piece; the plan sizes
// it (spec/kinds/image.cc, DirectConvWorkspace) and Make refuses a layer whose
// blocked sizes would not fit, which then runs on im2col. oneDNN's own
// scratch, when a primitive asks for one, is held per slot by this object
// (sized once, at construction). No allocation in a call.
#ifndef TAGI_WORKER_ENGINE_DIRECT_CONV_H_
#define TAGI_WORKER_ENGINE_DIRECT_CONV_H_

#include <memory>

#include "worker/engine/conv2d.h"
#include "worker/engine/layer.h"

namespace tagi::engine {

class DirectConv {
 public:
  // nullptr when oneDNN lacks a direct kernel for any of the seven products
  // of the shape (or for this CPU), or its buffers would exceed
  // `workspace_floats`: the layer then runs all seven on im2col.
  static std::unique_ptr<DirectConv> Make(const WindowGeometry& g, size_t out, bool bias,
                                          size_t workspace_floats);
  ~DirectConv();
  DirectConv(const DirectConv&) = delete;
  DirectConv& operator=(const DirectConv&) = delete;

  // out = the forward moments of io.in (biases included).
  void Forward(const LayerIo& io);
  // delta_in = the innovations of the input (io.delta_in.mu != nullptr).
  void BackwardData(const LayerIo& io);
  // The weight deltas' sums over the batch, before the var_w factors:
  // deltas[0].mu = delta_mu_z * mu_a^T, deltas[0].var = delta_var_z * (mu_a^2)^T.
  void BackwardWeights(const LayerIo& io);

  struct State;

 private:
  explicit DirectConv(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_DIRECT_CONV_H_
