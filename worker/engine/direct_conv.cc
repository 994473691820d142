#include "worker/engine/direct_conv.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "spec/kinds.h"

// The OpenMP runtime's (libgomp's: the one oneDNN runs on, linked by
// worker/engine/CMakeLists.txt), declared here rather than through the
// compiler's omp.h, which clang would take from another runtime.
extern "C" void omp_set_num_threads(int threads);

namespace tagi::engine {
namespace {

using dnnl::memory;
using Dims = memory::dims;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

// A primitive and the operands it reads and writes, each a memory object
// whose handle is set before every call (so a call allocates nothing).
struct Call {
  dnnl::primitive prim;
  std::vector<dnnl_exec_arg_t> args;  // handles of the memory objects below
  std::vector<memory> mems;

  void Set(size_t i, const void* p) const {
    dnnl_memory_set_data_handle(mems[i].get(), const_cast<void*>(p));
  }
  // oneDNN refuses a call only for operands unlike those its primitive was
  // made for, which these never are: a refusal is a bug, and stops here.
  void Run(const dnnl::stream& s) const {
    const dnnl_status_t status =
        dnnl_primitive_execute(prim.get(), s.get(), static_cast<int>(args.size()), args.data());
    if (status != dnnl_success) {
      std::fprintf(stderr, "oneDNN refused a convolution call: status %d\n",
                   static_cast<int>(status));
      std::abort();
    }
  }
};

Call MakeCall(dnnl::primitive prim, const dnnl::engine& eng,
              const std::vector<std::pair<int, memory::desc>>& operands) {
  Call c;
  c.prim = std::move(prim);
  for (const auto& [arg, md] : operands) {
    c.mems.emplace_back(md, eng, nullptr);
    c.args.push_back({arg, c.mems.back().get()});
  }
  return c;
}

// The same primitive with memory objects of its own (a memory object's
// handle is set per call, so concurrent calls need their own).
Call Clone(const Call& c, const dnnl::engine& eng) {
  Call copy;
  copy.prim = c.prim;
  for (size_t i = 0; i < c.mems.size(); ++i) {
    copy.mems.emplace_back(c.mems[i].get_desc(), eng, nullptr);
    copy.args.push_back({c.args[i].arg, copy.mems.back().get()});
  }
  return copy;
}

// A reorder between the plain layout and a blocked one (or nothing, when
// the primitive takes the plain layout as it is).
struct Move {
  bool needed = false;
  Call call;  // operands: 0 from, 1 to
  size_t floats = 0;  // of the larger side
};

Move MakeMove(const dnnl::engine& eng, const memory::desc& from, const memory::desc& to) {
  Move m;
  m.floats = std::max(from.get_size(), to.get_size()) / sizeof(float);
  if (from == to) return m;
  m.needed = true;
  dnnl::reorder::primitive_desc pd(eng, from, eng, to);
  m.call = MakeCall(dnnl::reorder(pd), eng, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  return m;
}

bool IsDirect(const dnnl::primitive_desc_base& pd) {
  const std::string impl = pd.impl_info_str();
  return impl.rfind("jit:", 0) == 0 && impl.find("gemm") == std::string::npos;
}

// Everything for calls over `mb` samples.
struct Shape {
  size_t mb = 0;
  Call fwd;       // operands: src, weights, dst[, bias]
  Call fwd_sum;   // the same with dst += (no bias)
  Call bwd_data;  // operands: diff_dst, weights, diff_src
  Move src_in, dst_out, ddst_in, dsrc_out;  // plain <-> blocked activations
  size_t scratch = 0;  // bytes, the largest any of the three asks
};

// Gives the calls (members of a copy) memory objects of their own.
void OwnMemory(std::initializer_list<Call*> calls, const dnnl::engine& eng) {
  for (Call* c : calls) {
    if (c->prim) *c = Clone(*c, eng);
  }
}

// Backward-weights over `mb` samples, for one half (mu or var): the input
// (mu_a, squared in place for the var half) and the output innovations into
// the blocked layout, the product into a blocked weight buffer, and that
// into the plain deltas, assigned (the first piece of a batch) or added.
struct WeightShape {
  size_t mb = 0;
  Call bwd_w;  // operands: src, diff_dst, diff_weights, scratchpad
  Move src_in, ddst_in;
  Move assign, add;  // blocked diff_weights -> plain [out][in][k][k]
  size_t scratch = 0;
};

// A slot's own copies.
WeightShape Clone(const WeightShape& w, const dnnl::engine& eng) {
  WeightShape copy = w;
  OwnMemory({&copy.bwd_w, &copy.src_in.call, &copy.ddst_in.call, &copy.assign.call,
             &copy.add.call},
            eng);
  return copy;
}

Shape Clone(const Shape& s, const dnnl::engine& eng) {
  Shape copy = s;
  OwnMemory({&copy.fwd, &copy.fwd_sum, &copy.bwd_data, &copy.src_in.call, &copy.dst_out.call,
             &copy.ddst_in.call, &copy.dsrc_out.call},
            eng);
  return copy;
}

}  // namespace

struct DirectConv::State {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  size_t in_n = 0;   // floats of one input sample
  size_t out_n = 0;  // of one output sample
  size_t slice = 1;  // samples per call
  size_t slots = 1;
  bool bias = false;
  // Per slot: `slice` samples, and one sample (the batch's remainder).
  std::vector<Shape> full, one;
  Move wf, wb;  // weights: plain -> the forward's / backward-data's blocked layout
  size_t wf_floats = 0, wb_floats = 0, slot_floats = 0;
  std::vector<dnnl::stream> streams;        // one per slot
  std::vector<std::vector<char>> scratch;  // one per slot
  // Backward-weights: pieces of 2^i samples (i < pieces.size() / 2), each
  // for the mu half (even index) and the var half (odd).
  std::vector<WeightShape> pieces;
  size_t w_src_floats = 0, w_ddst_floats = 0, w_diff_floats = 0;
  std::vector<char> w_scratch[2];
};

namespace {

// A convolution's oneDNN dimensions over `mb` samples.
struct ConvDims {
  Dims src, dst, weights, strides, pad_l, pad_r;
};

ConvDims DimsOf(const WindowGeometry& g, size_t out, size_t mb) {
  const auto d = [](size_t v) { return static_cast<memory::dim>(v); };
  // padding_r so that out = (in + l + r - k) / s + 1 (it may be negative).
  const auto right = [&](size_t in, size_t o) {
    return d((o - 1) * g.stride + g.kernel) - d(in) - d(g.offset);
  };
  return {{d(mb), d(g.channels), d(g.height), d(g.width)},
          {d(mb), d(out), d(g.out_height), d(g.out_width)},
          {d(out), d(g.channels), d(g.kernel), d(g.kernel)},
          {d(g.stride), d(g.stride)},
          {d(g.offset), d(g.offset)},
          {right(g.height, g.out_height), right(g.width, g.out_width)}};
}

// The shape's calls; false when oneDNN has no direct kernel for it.
bool MakeShape(const WindowGeometry& g, size_t out, bool bias, size_t mb,
               const dnnl::engine& eng, Shape& s, memory::desc& wf_md, memory::desc& wb_md) {
  const ConvDims dims = DimsOf(g, out, mb);
  const Dims& strides = dims.strides;
  const Dims& pad_l = dims.pad_l;
  const Dims& pad_r = dims.pad_r;
  const memory::desc src_plain(dims.src, kF32, Tag::nchw);
  const memory::desc dst_plain(dims.dst, kF32, Tag::nchw);
  const memory::desc src_any(dims.src, kF32, Tag::any);
  const memory::desc dst_any(dims.dst, kF32, Tag::any);
  const memory::desc w_any(dims.weights, kF32, Tag::any);
  const memory::desc b_md = bias ? memory::desc({dims.weights[0]}, kF32, Tag::x) : memory::desc();

  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // (A copy of a primitive_attr shares its handle: make a second one.)
  dnnl::primitive_attr attr_sum;
  attr_sum.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops sum;
  sum.append_sum(1.0f);
  attr_sum.set_post_ops(sum);

  using Fwd = dnnl::convolution_forward;
  const Fwd::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                     src_any, w_any, b_md, dst_any, strides, pad_l, pad_r);
  const Fwd::primitive_desc fpd(fd, attr, eng);
  // The second variance product adds into the first; same layouts.
  const Fwd::desc fd_sum(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                         fpd.src_desc(), fpd.weights_desc(), fpd.dst_desc(), strides, pad_l,
                         pad_r);
  const Fwd::primitive_desc fpd_sum(fd_sum, attr_sum, eng);
  using Bwd = dnnl::convolution_backward_data;
  const Bwd::desc bd(dnnl::algorithm::convolution_direct, src_any, w_any, dst_any, strides, pad_l,
                     pad_r);
  const Bwd::primitive_desc bpd(bd, attr, eng, fpd);
  if (!IsDirect(fpd) || !IsDirect(fpd_sum) || !IsDirect(bpd)) return false;
  if (fpd_sum.src_desc() != fpd.src_desc() || fpd_sum.dst_desc() != fpd.dst_desc()) return false;

  std::vector<std::pair<int, memory::desc>> fwd_args = {{DNNL_ARG_SRC, fpd.src_desc()},
                                                         {DNNL_ARG_WEIGHTS, fpd.weights_desc()},
                                                         {DNNL_ARG_DST, fpd.dst_desc()}};
  if (bias) fwd_args.push_back({DNNL_ARG_BIAS, b_md});
  fwd_args.push_back({DNNL_ARG_SCRATCHPAD, fpd.scratchpad_desc()});
  s.fwd = MakeCall(Fwd(fpd), eng, fwd_args);
  s.fwd_sum = MakeCall(Fwd(fpd_sum), eng,
                       {{DNNL_ARG_SRC, fpd_sum.src_desc()},
                        {DNNL_ARG_WEIGHTS, fpd_sum.weights_desc()},
                        {DNNL_ARG_DST, fpd_sum.dst_desc()},
                        {DNNL_ARG_SCRATCHPAD, fpd_sum.scratchpad_desc()}});
  s.bwd_data = MakeCall(Bwd(bpd), eng,
                        {{DNNL_ARG_DIFF_DST, bpd.diff_dst_desc()},
                         {DNNL_ARG_WEIGHTS, bpd.weights_desc()},
                         {DNNL_ARG_DIFF_SRC, bpd.diff_src_desc()},
                         {DNNL_ARG_SCRATCHPAD, bpd.scratchpad_desc()}});
  s.mb = mb;
  s.scratch = std::max({fpd.scratchpad_desc().get_size(), fpd_sum.scratchpad_desc().get_size(),
                        bpd.scratchpad_desc().get_size()});
  s.src_in = MakeMove(eng, src_plain, fpd.src_desc());
  s.dst_out = MakeMove(eng, fpd.dst_desc(), dst_plain);
  s.ddst_in = MakeMove(eng, dst_plain, bpd.diff_dst_desc());
  s.dsrc_out = MakeMove(eng, bpd.diff_src_desc(), src_plain);
  wf_md = fpd.weights_desc();
  wb_md = bpd.weights_desc();
  return true;
}

// The backward-weights calls over `mb` samples; false when oneDNN has no
// direct kernel for them.
bool MakeWeightShape(const WindowGeometry& g, size_t out, size_t mb, const dnnl::engine& eng,
                     WeightShape& w) {
  const ConvDims dims = DimsOf(g, out, mb);
  const Dims& src_dims = dims.src;
  const Dims& dst_dims = dims.dst;
  const Dims& w_dims = dims.weights;
  const Dims& strides = dims.strides;
  const Dims& pad_l = dims.pad_l;
  const Dims& pad_r = dims.pad_r;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  using Fwd = dnnl::convolution_forward;
  const Fwd::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                     memory::desc(src_dims, kF32, Tag::any), memory::desc(w_dims, kF32, Tag::any),
                     memory::desc(dst_dims, kF32, Tag::any), strides, pad_l, pad_r);
  const Fwd::primitive_desc hint(fd, attr, eng);
  using Bww = dnnl::convolution_backward_weights;
  const Bww::desc bd(dnnl::algorithm::convolution_direct, memory::desc(src_dims, kF32, Tag::any),
                     memory::desc(w_dims, kF32, Tag::any),
                     memory::desc(dst_dims, kF32, Tag::any), strides, pad_l, pad_r);
  const Bww::primitive_desc pd(bd, attr, eng, hint);
  if (!IsDirect(pd)) return false;
  w.mb = mb;
  w.bwd_w = MakeCall(Bww(pd), eng,
                     {{DNNL_ARG_SRC, pd.src_desc()},
                      {DNNL_ARG_DIFF_DST, pd.diff_dst_desc()},
                      {DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc()},
                      {DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc()}});
  w.scratch = pd.scratchpad_desc().get_size();
  w.src_in = MakeMove(eng, memory::desc(src_dims, kF32, Tag::nchw), pd.src_desc());
  w.ddst_in = MakeMove(eng, memory::desc(dst_dims, kF32, Tag::nchw), pd.diff_dst_desc());
  const memory::desc w_plain(w_dims, kF32, Tag::oihw);
  w.assign = MakeMove(eng, pd.diff_weights_desc(), w_plain);
  // The add: a reorder whose result is summed into what is there.
  dnnl::primitive_attr add_attr;
  dnnl::post_ops sum;
  sum.append_sum(1.0f);
  add_attr.set_post_ops(sum);
  w.add.needed = true;
  w.add.floats = w.assign.floats;
  dnnl::reorder::primitive_desc add_pd(eng, pd.diff_weights_desc(), eng, w_plain, add_attr);
  w.add.call = MakeCall(dnnl::reorder(add_pd), eng,
                        {{DNNL_ARG_FROM, pd.diff_weights_desc()}, {DNNL_ARG_TO, w_plain}});
  return true;
}

// oneDNN on this thread runs on this thread only.
void OneThread() { omp_set_num_threads(1); }

}  // namespace

DirectConv::DirectConv(std::unique_ptr<State> state) : s_(std::move(state)) {}
DirectConv::~DirectConv() = default;

std::unique_ptr<DirectConv> DirectConv::Make(const WindowGeometry& g, size_t out, bool bias,
                                             size_t workspace_floats) {
  auto st = std::make_unique<State>();
  // oneDNN fits a primitive to the thread count it sees when it is made
  // (a backward-weights kernel then splits its sums over that many
  // threads): make every one for the single thread it will run on.
  OneThread();
  try {
    const size_t positions = g.out_size();
    st->slice = spec::DirectConvSlice(positions);
    st->slots = spec::kDirectConvSlots;
    st->bias = bias;
    st->in_n = g.channels * g.in_size();
    st->out_n = out * positions;
    memory::desc wf_md, wb_md;
    Shape full, one;
    if (!MakeShape(g, out, bias, st->slice, st->eng, full, wf_md, wb_md)) return nullptr;
    if (st->slice == 1) {
      one = full;  // never used: every slice is full
    } else {
      memory::desc wf1, wb1;
      if (!MakeShape(g, out, bias, 1, st->eng, one, wf1, wb1)) return nullptr;
      if (wf1 != wf_md || wb1 != wb_md) return nullptr;
    }
    const memory::desc w_plain(DimsOf(g, out, 1).weights, kF32, Tag::oihw);
    st->wf = MakeMove(st->eng, w_plain, wf_md);
    st->wb = MakeMove(st->eng, w_plain, wb_md);
    st->wf_floats = st->wf.floats;
    st->wb_floats = st->wb.floats;
    const Shape& f = full;
    st->slot_floats = std::max(f.src_in.floats, f.dsrc_out.floats) +
                      std::max(f.dst_out.floats, f.ddst_in.floats);
    const size_t need = std::max(3 * st->wf_floats, 2 * st->wb_floats) +
                        st->slots * st->slot_floats;
    if (need > workspace_floats) return nullptr;
    // Backward-weights pieces: 1, 2, 4, ... samples up to the largest power of
    // two within spec::ConvChunk (about 2,048 output positions).
    const size_t chunk = static_cast<size_t>(spec::ConvChunk(positions));
    size_t w_scratch = 0;
    for (size_t mb = 1; mb <= chunk; mb *= 2) {
      WeightShape w;
      if (!MakeWeightShape(g, out, mb, st->eng, w)) return nullptr;
      st->w_src_floats = std::max(st->w_src_floats, w.src_in.floats);
      st->w_ddst_floats = std::max(st->w_ddst_floats, w.ddst_in.floats);
      st->w_diff_floats = std::max(st->w_diff_floats, w.assign.floats);
      w_scratch = std::max(w_scratch, w.scratch);
      st->pieces.push_back(Clone(w, st->eng));
      st->pieces.push_back(std::move(w));
    }
    if (2 * (st->w_src_floats + st->w_ddst_floats + st->w_diff_floats) > workspace_floats) {
      return nullptr;
    }
    for (auto& v : st->w_scratch) v.resize(w_scratch + 64);
    for (size_t i = 0; i < st->slots; ++i) {
      st->streams.emplace_back(st->eng);
      st->scratch.emplace_back(std::max(full.scratch, one.scratch) + 64);
      st->full.push_back(Clone(full, st->eng));
      st->one.push_back(Clone(one, st->eng));
    }
  } catch (const dnnl::error&) {
    return nullptr;
  }
  return std::unique_ptr<DirectConv>(new DirectConv(std::move(st)));
}

namespace {

// Plain [m][...] at `plain` into the blocked layout at `buf`; returns what
// the primitive reads (the plain data itself when no reorder is needed).
const float* Stage(const Move& m, const dnnl::stream& s, const float* plain, float* buf) {
  if (!m.needed) return plain;
  m.call.Set(0, plain);
  m.call.Set(1, buf);
  m.call.Run(s);
  return buf;
}

void Unstage(const Move& m, const dnnl::stream& s, const float* buf, float* plain) {
  if (!m.needed) return;  // the primitive wrote `plain` itself
  m.call.Set(0, buf);
  m.call.Set(1, plain);
  m.call.Run(s);
}

void Square(const float* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = in[i] * in[i];
}

// The batch in rounds of the workspace's slots, a round's slots over the
// team: fn(slot, first sample, shape, stream, scratch, slot buffer, its
// second half) once per call (a full slice, or one sample of a short one).
template <typename Fn>
void ForEachCall(DirectConv::State& st, const LayerIo& io, float* slots, const Fn& fn) {
  const size_t per_round = st.slots * st.slice;
  for (size_t first = 0; first < io.batch; first += per_round) {
    const size_t left = std::min(per_round, io.batch - first);
    const size_t calls = (left + st.slice - 1) / st.slice;
    ParallelFor(io.team, calls, 2, [&](size_t c0, size_t c1) {
      OneThread();
      for (size_t c = c0; c < c1; ++c) {
        float* buf = slots + c * st.slot_floats;
        float* half = buf + std::max(st.full[c].src_in.floats, st.full[c].dsrc_out.floats);
        const size_t b0 = first + c * st.slice;
        const size_t n = std::min(st.slice, io.batch - b0);
        if (n == st.slice) {
          fn(b0, st.full[c], st.streams[c], st.scratch[c].data(), buf, half);
          continue;
        }
        for (size_t b = b0; b < b0 + n; ++b) {
          fn(b, st.one[c], st.streams[c], st.scratch[c].data(), buf, half);
        }
      }
    });
  }
}

}  // namespace

void DirectConv::Forward(const LayerIo& io) {
  State& st = *s_;
  float* wmu = io.workspace;
  float* wmix = wmu + st.wf_floats;  // mu_w^2 + var_w
  float* wvar = wmix + st.wf_floats;
  float* slots = io.workspace + std::max(3 * st.wf_floats, 2 * st.wb_floats);
  const float* w2v = io.derived + io.block_size[0];
  OneThread();
  const float* wmu_use = Stage(st.wf, st.streams[0], io.params[0].mu, wmu);
  const float* wmix_use = io.input_is_data ? w2v : Stage(st.wf, st.streams[0], w2v, wmix);
  const float* wvar_use = Stage(st.wf, st.streams[0], io.params[0].var, wvar);
  ForEachCall(st, io, slots, [&](size_t b, const Shape& sh, const dnnl::stream& s,
                                 char* scratch, float* src_buf, float* dst_buf) {
    float* out_mu = io.out.mu + b * st.out_n;
    float* out_var = io.out.var + b * st.out_n;
    // mu_z = mu_w * mu_a + mu_b
    const float* src = Stage(sh.src_in, s, io.in.mu + b * st.in_n, src_buf);
    float* dst = sh.dst_out.needed ? dst_buf : out_mu;
    sh.fwd.Set(0, src);
    sh.fwd.Set(1, wmu_use);
    sh.fwd.Set(2, dst);
    size_t next = 3;
    if (st.bias) sh.fwd.Set(next++, io.params[1].mu);
    sh.fwd.Set(next, scratch);
    sh.fwd.Run(s);
    Unstage(sh.dst_out, s, dst, out_mu);
    // var_z = var_w * mu_a^2 + var_b (+ (mu_w^2 + var_w) * var_a below)
    Square(src, src_buf, sh.src_in.needed ? sh.src_in.floats : sh.mb * st.in_n);
    dst = sh.dst_out.needed ? dst_buf : out_var;
    sh.fwd.Set(0, src_buf);
    sh.fwd.Set(1, wvar_use);
    sh.fwd.Set(2, dst);
    if (st.bias) sh.fwd.Set(3, io.params[1].var);
    sh.fwd.Run(s);
    if (!io.input_is_data) {
      sh.fwd_sum.Set(0, Stage(sh.src_in, s, io.in.var + b * st.in_n, src_buf));
      sh.fwd_sum.Set(1, wmix_use);
      sh.fwd_sum.Set(2, dst);
      sh.fwd_sum.Set(3, scratch);
      sh.fwd_sum.Run(s);
    }
    Unstage(sh.dst_out, s, dst, out_var);
  });
}

void DirectConv::BackwardData(const LayerIo& io) {
  State& st = *s_;
  float* slots = io.workspace + std::max(3 * st.wf_floats, 2 * st.wb_floats);
  OneThread();
  const std::array<const float*, 2> weights = {
      Stage(st.wb, st.streams[0], io.params[0].mu, io.workspace),
      Stage(st.wb, st.streams[0], io.derived, io.workspace + st.wb_floats)};  // mu_w^2
  ForEachCall(st, io, slots, [&](size_t b, const Shape& sh, const dnnl::stream& s,
                                 char* scratch, float* dsrc_buf, float* ddst_buf) {
    const std::array<std::pair<const float*, float*>, 2> halves = {
        std::pair{io.delta_out.mu + b * st.out_n, io.delta_in.mu + b * st.in_n},
        std::pair{io.delta_out.var + b * st.out_n, io.delta_in.var + b * st.in_n}};
    for (size_t h = 0; h < 2; ++h) {
      float* dsrc = sh.dsrc_out.needed ? dsrc_buf : halves[h].second;
      sh.bwd_data.Set(0, Stage(sh.ddst_in, s, halves[h].first, ddst_buf));
      sh.bwd_data.Set(1, weights[h]);
      sh.bwd_data.Set(2, dsrc);
      sh.bwd_data.Set(3, scratch);
      sh.bwd_data.Run(s);
      Unstage(sh.dsrc_out, s, dsrc, halves[h].second);
    }
  });
}

void DirectConv::BackwardWeights(const LayerIo& io) {
  State& st = *s_;
  const size_t sizes = st.pieces.size() / 2;
  // The two halves side by side, each whole on one thread.
  ParallelFor(io.team, 2, 2, [&](size_t h0, size_t h1) {
    OneThread();
    for (size_t h = h0; h < h1; ++h) {
      const dnnl::stream& s = st.streams[h];
      float* src_buf = io.workspace + h * (st.w_src_floats + st.w_ddst_floats + st.w_diff_floats);
      float* ddst_buf = src_buf + st.w_src_floats;
      float* diff_buf = ddst_buf + st.w_ddst_floats;
      const float* ddst_plain = h == 0 ? io.delta_out.mu : io.delta_out.var;
      float* dw = h == 0 ? io.deltas[0].mu : io.deltas[0].var;
      char* scratch = st.w_scratch[h].data();
      // Pieces of the largest size while they fit, then the binary digits of
      // the rest: the cut depends on the batch alone.
      for (size_t b = 0, i = sizes - 1; b < io.batch;) {
        while ((size_t{1} << i) > io.batch - b) --i;
        const WeightShape& w = st.pieces[2 * i + h];
        const bool first = b == 0;
        const float* src = Stage(w.src_in, s, io.in.mu + b * st.in_n, src_buf);
        if (h == 1) {  // mu_a^2
          const size_t n = w.src_in.needed ? w.src_in.floats : w.mb * st.in_n;
          Square(src, src_buf, n);
          src = src_buf;
        }
        const float* ddst = Stage(w.ddst_in, s, ddst_plain + b * st.out_n, ddst_buf);
        float* diff = (first && !w.assign.needed) ? dw : diff_buf;
        w.bwd_w.Set(0, src);
        w.bwd_w.Set(1, ddst);
        w.bwd_w.Set(2, diff);
        w.bwd_w.Set(3, scratch);
        w.bwd_w.Run(s);
        if (first) {
          Unstage(w.assign, s, diff_buf, dw);
        } else {
          w.add.call.Set(0, diff_buf);
          w.add.call.Set(1, dw);
          w.add.call.Run(s);
        }
        b += w.mb;
      }
    }
  });
}

}  // namespace tagi::engine
