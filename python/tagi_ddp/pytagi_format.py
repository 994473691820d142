"""Conversion between tagi-ddp model files and pytagi 0.2.1's save format.

pytagi's Sequential.save writes, for every layer with parameters in order
(activations write nothing), a size_t name length, the layer's get_layer_info() name
("Linear(784,100)", "ReLU()") and its float32 mu_w, var_w, mu_b, var_b
(src/base_layer.cpp of cuTAGI 0.2.1); Sequential.load checks each name.
A Linear's weights are [out][in] there as here.

Supported so far: networks of Linear layers and activations (ReLU,
Sigmoid, Tanh, Softplus, MixtureReLU, LeakyReLU with pytagi's slope 0.1).
Other kinds raise NotImplementedError naming the layer. A model file
written by from_pytagi has no input standardisation (pytagi keeps none).
"""
import struct
import zlib

import numpy as np

from . import shapes
from .model import MAGIC, decode_model

_NAMES = {"relu": "ReLU()", "sigmoid": "Sigmoid()", "tanh": "Tanh()", "softplus": "Softplus()",
          "mixtureRelu": "MixtureReLU()", "leakyRelu": "leakyReLU()"}


def _check(layers):
    for i, layer in enumerate(layers):
        kind = shapes.kind_of(layer)
        if kind == "leakyRelu" and abs(float(layer[kind].get("negativeSlope", 0.1)) - 0.1) > 1e-7:
            raise NotImplementedError(f"layers[{i}]: pytagi's LeakyReLU has slope 0.1 only")
        if kind != "linear" and kind not in _NAMES:
            raise NotImplementedError(f"layers[{i}] ({kind}): the pytagi conversion handles "
                                      f"Linear layers and activations so far")


def _name(layer):
    kind = shapes.kind_of(layer)
    if kind == "linear":
        return f"Linear({int(layer[kind]['inFeatures'])},{int(layer[kind]['outFeatures'])})"
    return _NAMES[kind]


def to_pytagi(model, path):
    """Writes `model` (a tagi_ddp.Model) in pytagi's save format for Sequential.load."""
    _check(model.layers)
    out = bytearray()
    planned = iter(model.planned)
    for layer in model.layers:
        lp = next(planned)
        if lp.kind == "linear":
            name = _name(layer).encode()
            out += struct.pack("<Q", len(name)) + name
            for block in (lp.mu_w, lp.var_w, lp.mu_b, lp.var_b):
                out += np.ascontiguousarray(block, dtype="<f4").tobytes()
    with open(path, "wb") as f:
        f.write(out)


def _network_bytes(layers, input_width, head):
    """The canonical tagi.v1.Network record (spec/network_proto.cc ArchitectureToProto)."""
    from ._stubs import job_pb2
    net = job_pb2.Network()
    net.input.channels, net.input.height, net.input.width = input_width, 1, 1
    for layer in layers:
        kind = shapes.kind_of(layer)
        l = net.layers.add()
        if kind == "linear":
            l.linear.in_features = int(layer[kind]["inFeatures"])
            l.linear.out_features = int(layer[kind]["outFeatures"])
        elif kind == "leakyRelu":
            l.leaky_relu.negative_slope = 0.1
        else:
            getattr(l, {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh",
                        "softplus": "softplus", "mixtureRelu": "mixture_relu"}[kind]).SetInParent()
    if "classification" in head:
        net.head.classification.num_classes = int(head["classification"]["numClasses"])
    else:
        net.head.regression.SetInParent()
    return net.SerializeToString()


def from_pytagi(path, net, num_classes=None):
    """A tagi-ddp model file's bytes from pytagi's save of `net` (a tagi_ddp.nn.Sequential
    with the layers the pytagi network had); decode_model(result) reads it back."""
    layers, _ = net.layer_dicts()
    _check(layers)
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    mus, vars_ = [], []
    for i, layer in enumerate(layers):
        if shapes.kind_of(layer) != "linear":
            continue
        if at + 8 > len(data):
            raise ValueError(f"{path}: ends before layer {i} ({_name(layer)})")
        (n,) = struct.unpack_from("<Q", data, at)
        name = data[at + 8:at + 8 + n].decode(errors="replace")
        at += 8 + n
        if name != _name(layer):
            raise ValueError(f"{path}: layer {i} is {name!r}; the network has {_name(layer)!r}")
        o, k = int(layer["linear"]["outFeatures"]), int(layer["linear"]["inFeatures"])
        blocks = []
        for count in (o * k, o * k, o, o):
            if at + 4 * count > len(data):
                raise ValueError(f"{path}: truncated in layer {i} ({name})")
            blocks.append(np.frombuffer(data, "<f4", count, at))
            at += 4 * count
        mus += [blocks[0], blocks[2]]
        vars_ += [blocks[1], blocks[3]]
    if at != len(data):
        raise ValueError(f"{path}: {len(data) - at} bytes after the last layer")
    head = {"classification": {"numClasses": num_classes}} if num_classes else {"regression": {}}
    arch = _network_bytes(layers, int(layers[0]["linear"]["inFeatures"]), head)
    mu = np.concatenate(mus).astype("<f4")
    var = np.concatenate(vars_).astype("<f4")
    body = struct.pack("<I", len(arch)) + arch + struct.pack("<IIII", 0, 0, 0, 0)
    body += struct.pack("<Q", len(mu)) + mu.tobytes() + var.tobytes() + struct.pack("<Q", 0)
    blob = MAGIC + struct.pack("<IQ", 2, len(body)) + body
    blob += struct.pack("<I", zlib.crc32(blob) & 0xFFFFFFFF)
    decode_model(blob)  # what we write, we read
    return blob
