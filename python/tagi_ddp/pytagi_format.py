"""Conversion between tagi-ddp model files and pytagi 0.2.1's save format.

    to_pytagi(load_model("job.tagi"), "net.bin")          # pytagi: net.load("net.bin")
    blob = from_pytagi("net.bin", net, num_classes=10)     # net: a tagi_ddp.nn.Sequential

pytagi's Sequential.save (cuTAGI 0.2.1, src/sequential.cpp) asks every layer
in order to save itself; a layer writes a record: its get_layer_info() name
(a little-endian size_t length, then the text) and its float32 mu_w, var_w,
mu_b, var_b (src/base_layer.cpp BaseLayer::save); Sequential.load checks each
name and reads as many values as the layer it loads into holds. Per kind:

  Linear       "Linear(in,out)"; w [out][in], b [out]
  Conv2d       "Conv2d(in_c,out_c,out_width,out_height,k)"; w [out][in][k_row][k_col],
               as ours (src/indices.cpp get_ref_kernel); b [out], none without bias
  AvgPool2d    "AvgPool2d(C,C,out_width,out_height,k)", no values
  MaxPool2d    "MaxPool2d(C,C,out_width,out_height,k)", no values
  BatchNorm2d  "BatchNorm2d()"; gamma, beta [C] (beta none without bias), then the
               running mean and running variance [C] (src/batchnorm_layer.cpp)
  LayerNorm    "LayerNorm()"; gamma, beta [C or F], then the per-sample statistics
               of the last forward, mu_ra and var_ra [B] each (B = 0 before any
               forward; src/layernorm_layer.cpp)
  activations  nothing at all (their save is empty, include/activation.h), the
               output activations Remax, ClosedFormSoftmax and EvenExp included
  LayerBlock   its layers' records; ResNetBlock: the main block's, then the
               shortcut's; neither writes a record of its own.

The sizes in the names come from pytagi's shape propagation, which handles
square images only. What a name does not say (strides, padding, eps,
momentum, bias of a norm) the pytagi network must state as the model does.
Where pytagi 0.2.1 cannot express or compute one of our networks, both
directions raise NotImplementedError naming the layer and the reason. A model
file written by from_pytagi has no input standardisation (pytagi keeps none).
"""
import struct
import zlib

import numpy as np

from . import shapes
from .model import MAGIC, decode_model

_ACTIVATIONS = {"relu": "ReLU()", "sigmoid": "Sigmoid()", "tanh": "Tanh()",
                "softplus": "Softplus()", "mixtureRelu": "MixtureReLU()",
                "leakyRelu": "leakyReLU()", "remax": "Remax()",
                "closedFormSoftmax": "ClosedFormSoftmax()", "evenExp": "EvenExp()"}
_IMAGE_KINDS = ("conv2d", "avgPool2d", "maxPool2d")


class _Record:
    """One record of pytagi's file: a layer that saves itself (activations do not)."""

    def __init__(self, index, path, kind, spec, in_shape, out_shape, name, blocks, stats):
        self.index = index          # the layer's position among the model's planned layers
        self.path = path
        self.kind = kind
        self.spec = spec
        self.in_shape = in_shape
        self.out_shape = out_shape
        self.name = name
        self.blocks = blocks        # value counts of mu_w, var_w, mu_b, var_b
        self.stats = stats          # value count of each of the two statistics after them


def _refuse(path, kind, why):
    raise NotImplementedError(f"{path} ({kind}): {why}")


def _records(layers, input_shape):
    """The network's layers in pytagi's save order, checked for what pytagi 0.2.1 can run.

    Returns (records, count): one _Record per layer that writes one, and the
    number of planned (non-residual) layers, the order of Model.planned.
    """
    records = []
    flat = input_shape[1:] == (1, 1)
    if not flat and (not layers or shapes.kind_of(layers[0]) != "conv2d"):
        first = shapes.kind_of(layers[0]) if layers else "nothing"
        _refuse("layers[0]", first, f"the input is an image {input_shape}; pytagi 0.2.1 learns "
                f"an image's size only from a first Conv2d's in_width/in_height")
    # pytagi's idea of the channel count (Sequential::compute_input_output_size: a
    # layer without image geometry passes its input's on, src/base_layer.cpp).
    state = {"index": 0, "depth": 0 if flat else input_shape[0]}

    def walk(seq, shape, path):
        for i, layer in enumerate(seq):
            at = f"{path}[{i}]"
            kind = shapes.kind_of(layer)
            spec = layer[kind] or {}
            out = shapes.infer_layer(layer, shape, at)
            if kind == "residual":
                if path == "layers" and i == 0:
                    _refuse(at, kind, "pytagi 0.2.1 cannot start a network with a block (its "
                            "input size is 0 there: a division by zero)")
                depth = state["depth"]
                walk(spec.get("main", []), shape, at + ".residual.main")
                state["depth"] = depth
                walk(spec.get("shortcut", []), shape, at + ".residual.shortcut")
                if out[1:] != (1, 1):
                    state["depth"] = out[0]
                shape = out
                continue
            index = state["index"]
            state["index"] += 1
            c_in, h, w = shape
            if kind in _ACTIVATIONS:
                if kind == "leakyRelu" and abs(float(spec.get("negativeSlope", 0.1)) - 0.1) > 1e-7:
                    _refuse(at, kind, "pytagi's LeakyReLU has the slope 0.1 only")
                shape = out
                continue
            if kind in _IMAGE_KINDS and h != w:
                _refuse(at, kind, f"its input is {h}x{w}; pytagi 0.2.1 handles square images "
                        f"only (it sizes every image as width x width)")
            if kind in _IMAGE_KINDS:
                state["depth"] = out[0]
            if kind == "linear":
                o = int(spec["outFeatures"])
                name = f"Linear({int(spec['inFeatures'])},{o})"
                blocks, stats = (o * c_in * h * w, o), 0
            elif kind == "conv2d":
                o, k = int(spec["outChannels"]), int(spec["kernelSize"])
                name = f"Conv2d({c_in},{o},{out[2]},{out[1]},{k})"
                blocks, stats = (o * c_in * k * k, o if spec.get("bias", True) else 0), 0
            elif kind in ("avgPool2d", "maxPool2d"):
                k, s, padding, _, _ = shapes.window(spec, None, None)
                if padding and (k == s or k == w):
                    _refuse(at, kind, f"a pool whose kernel equals its stride ({k}) or its input "
                            f"width reads other planes' values as padding in pytagi 0.2.1 "
                            f"(docs/maths.md section 14, B5); padding {padding} would not give "
                            f"our outputs")
                name = (f"{'AvgPool2d' if kind == 'avgPool2d' else 'MaxPool2d'}"
                        f"({c_in},{c_in},{out[2]},{out[1]},{k})")
                blocks, stats = (0, 0), 0
            elif kind == "batchNorm":
                if (h, w) == (1, 1) and state["depth"] == c_in:
                    _refuse(at, kind, f"a batch norm of {c_in} features after a Linear that "
                            f"follows {c_in}-channel images runs pytagi 0.2.1's per-channel "
                            f"(image) path on a vector (docs/maths.md section 14, B3)")
                name = "BatchNorm2d()"
                blocks, stats = (c_in, c_in if spec.get("bias", True) else 0), c_in
            elif kind == "layerNorm":
                name = "LayerNorm()"
                blocks = (c_in, c_in if spec.get("bias", True) else 0)
                stats = None  # per sample: as many as the last forward's batch
            else:
                _refuse(at, kind, "pytagi 0.2.1 has no such layer")
            records.append(_Record(index, at, kind, spec, shape, out, name, blocks, stats))
            shape = out
        return shape

    walk(layers, tuple(input_shape), "layers")
    return records, state["index"]


def _name_bytes(name):
    data = name.encode()
    return struct.pack("<Q", len(data)) + data


def to_pytagi(model, path):
    """Writes `model` (a tagi_ddp.Model) in pytagi 0.2.1's save format, for Sequential.load
    on a pytagi network of the same layers. A LayerNorm is written with no per-sample
    statistics, which is what a network that has not run a forward yet reads."""
    records, count = _records(model.layers, model.input_shape)
    assert count == len(model.planned)
    out = bytearray()
    for rec in records:
        lp = model.planned[rec.index]
        out += _name_bytes(rec.name)
        for block in (lp.mu_w, lp.var_w, lp.mu_b, lp.var_b):
            if block is not None:
                out += np.ascontiguousarray(block, dtype="<f4").tobytes()
        if rec.kind == "batchNorm":
            out += np.ascontiguousarray(lp.state["mu_ra"], dtype="<f4").tobytes()
            out += np.ascontiguousarray(lp.state["var_ra"], dtype="<f4").tobytes()
    with open(path, "wb") as f:
        f.write(out)


def _canonical(layers):
    """Sets the defaults the engine writes explicitly (spec/kinds/*.cc ToProto), so the
    architecture record is in the canonical form model files must hold."""
    from ._stubs import job_pb2
    L = job_pb2.Layer
    for l in layers:
        which = l.WhichOneof("layer")
        if which == "conv2d":
            c = l.conv2d
            if not c.HasField("stride"):
                c.stride = 1
            if c.padding_type == L.PADDING_UNSPECIFIED:
                c.padding_type = L.SYMMETRIC
            if not c.HasField("bias"):
                c.bias = True
        elif which in ("avg_pool2d", "max_pool2d"):
            p = getattr(l, which)
            if not p.HasField("stride"):
                p.stride = p.kernel_size
        elif which == "batch_norm":
            b = l.batch_norm
            if not b.HasField("eps"):
                b.eps = 1e-5
            if not b.HasField("momentum"):
                b.momentum = 0.9
            if not b.HasField("bias"):
                b.bias = True
        elif which == "layer_norm":
            n = l.layer_norm
            if not n.HasField("eps"):
                n.eps = 1e-5
            if not n.HasField("bias"):
                n.bias = True
        elif which == "leaky_relu":
            if not l.leaky_relu.HasField("negative_slope"):
                l.leaky_relu.negative_slope = 0.1
        elif which == "residual":
            _canonical(l.residual.main)
            _canonical(l.residual.shortcut)


def _network_bytes(layers, input_shape, head):
    """The canonical tagi.v1.Network record (spec/network_proto.cc ArchitectureToProto)."""
    from google.protobuf import json_format
    from ._stubs import job_pb2
    c, h, w = input_shape
    net = json_format.ParseDict({"input": {"channels": c, "height": h, "width": w},
                                 "layers": layers, "head": head}, job_pb2.Network())
    _canonical(net.layers)
    return net.SerializeToString()


def _is_initial(mu_ra, var_ra):
    return bool(np.all(mu_ra == 0.0) and np.all(var_ra == 1.0))


def from_pytagi(path, net, num_classes=None, input_shape=None):
    """A tagi-ddp model file's bytes from pytagi's save of `net` (a tagi_ddp.nn.Sequential
    with the layers the pytagi network had); decode_model(result) reads it back.

    The head is the one net.to_job_dict would give: with num_classes, one-hot
    when net ends with Remax or ClosedFormSoftmax, else hierarchical softmax;
    without, heteroscedastic regression when net ends with EvenExp, else
    regression.

    input_shape (C, H, W) is needed only when net's first layer does not state it.
    A batch norm's running statistics come over; its first-batch flag (which pytagi
    does not save) is set where the statistics are still the initial 0 and 1, so a
    layer that has seen training batches keeps them when a job starts from the file.
    A LayerNorm's per-sample statistics (any batch size) are read and dropped: the
    engine keeps none.
    """
    shape = tuple(input_shape) if input_shape else net.input_shape()
    if shape is None:
        raise ValueError("from_pytagi: the network's first layer does not state its input "
                         "shape; pass input_shape=(C, H, W)")
    layers, out_shape = net.layer_dicts(shape)
    head = net._head(num_classes or None, out_shape)
    records, _ = _records(layers, shape)
    with open(path, "rb") as f:
        data = f.read()
    # A LayerNorm saves the statistics of its last forward's batch, B values twice;
    # every LayerNorm of a network saw the same B, which the file's size tells.
    fixed = sum(len(_name_bytes(r.name)) + 4 * (2 * sum(r.blocks) + 2 * (r.stats or 0))
                for r in records)
    norms = sum(1 for r in records if r.kind == "layerNorm")
    extra = len(data) - fixed
    batch = 0
    if norms and extra > 0 and extra % (8 * norms) == 0:
        batch = extra // (8 * norms)
    at = 0
    mus, vars_, state = [], [], []
    for rec in records:
        want = _name_bytes(rec.name)
        if data[at:at + len(want)] != want:
            if at + 8 > len(data):
                raise ValueError(f"{path}: ends before {rec.path} ({rec.name})")
            (n,) = struct.unpack_from("<Q", data, at)
            found = data[at + 8:at + 8 + min(n, 200)].decode(errors="replace")
            raise ValueError(f"{path}: {rec.path} is {found!r} in the file; the network has "
                             f"{rec.name!r}")
        at += len(want)
        stats = batch if rec.stats is None else rec.stats
        values = []
        for count in rec.blocks[:1] * 2 + rec.blocks[1:] * 2 + (stats, stats):
            if at + 4 * count > len(data):
                raise ValueError(f"{path}: truncated in {rec.path} ({rec.name})")
            values.append(np.frombuffer(data, "<f4", count, at))
            at += 4 * count
        mu_w, var_w, mu_b, var_b, mu_ra, var_ra = values
        mus += [mu_w, mu_b]
        vars_ += [var_w, var_b]
        if rec.kind == "batchNorm":
            first = np.ones(1, "<f4") if _is_initial(mu_ra, var_ra) else np.zeros(1, "<f4")
            state += [mu_ra, var_ra, first]
    if at != len(data):
        raise ValueError(f"{path}: {len(data) - at} bytes after the last layer")
    arch = _network_bytes(layers, shape, head)
    mu = np.concatenate(mus).astype("<f4")
    var = np.concatenate(vars_).astype("<f4")
    st = np.concatenate(state).astype("<f4") if state else np.zeros(0, "<f4")
    body = struct.pack("<I", len(arch)) + arch + struct.pack("<IIII", 0, 0, 0, 0)
    body += struct.pack("<Q", len(mu)) + mu.tobytes() + var.tobytes()
    body += struct.pack("<Q", len(st)) + st.tobytes()
    blob = MAGIC + struct.pack("<IQ", 2, len(body)) + body
    blob += struct.pack("<I", zlib.crc32(blob) & 0xFFFFFFFF)
    decode_model(blob)  # what we write, we read
    return blob
