"""A model builder with pytagi's layer names and argument order.

A pytagi network definition moves over by changing its import:

    from tagi_ddp.nn import Sequential, Conv2d, ReLU, BatchNorm2d, AvgPool2d, Linear
    net = Sequential(Conv2d(1, 32, 4, padding=1, in_width=28, in_height=28, bias=False),
                     ReLU(), BatchNorm2d(32), AvgPool2d(3, 2), ...)
    spec = net.to_job_spec(name="cnn", data=tagi_ddp.data.fashion_mnist(), num_classes=10,
                           sigma_v=0.2, batch_size=128, epochs=3)

The constructors take the arguments of pytagi 0.2.1 (same names, same order,
same defaults) and build a description only: nothing is trained here. The
layers are exactly the kinds the tagi-ddp engine runs (tagi.v1.Layer); an
argument the engine has no equivalent for (Linear(bias=False), per-layer
initialisation that differs between layers, BatchNorm2d gains) raises
UnsupportedError, and so does constructing any other pytagi layer (Softmax,
LSTM, ...). Shapes and sizes are checked by the coordinator at submission
(common/job_spec.h), whose message comes back in the client's exception;
the builder checks only what the job format cannot carry (LayerNorm's
normalized_shape, in_width on a later layer).

Where pytagi and the engine differ, the engine's meaning applies and the
builder says so here:
  - AvgPool2d's default stride -1 means a stride equal to the kernel (what
    pytagi's docstring says; pytagi computes it right only for a global pool).
  - A pool's padding needs padding_type 1 or 2 (pytagi's type 0 with padding
    is undefined behaviour there).
  - LeakyReLU() has pytagi's slope 0.1; `negative_slope=` is an extension.

The output activations choose the head (docs/heads.md), as pytagi's examples
use them; each may only be the network's last layer:
  - ... Linear(n, K), Remax() or ClosedFormSoftmax() with num_classes=K: one
    output per class, observed one-hot (1 for the label, 0 for the others)
    with noise sigma_v (Head.Classification.output ONE_HOT);
  - ... Linear(n, 2 * targets), EvenExp() without num_classes: heteroscedastic
    regression, [mean, noise] per target, the noise learned per input;
    sigma_v may then be None (no "noise" in the job: it is not used).
Without them, num_classes means hierarchical softmax (the last Linear has
hsm_output_width(K) units) and no num_classes plain Gaussian regression.
"""
import json

from . import shapes


class UnsupportedError(ValueError):
    """A pytagi layer or argument that the tagi-ddp engine does not support."""


SUPPORTED = ("Linear", "Conv2d", "BatchNorm2d", "LayerNorm", "AvgPool2d", "MaxPool2d", "ReLU",
             "LeakyReLU", "Sigmoid", "Tanh", "Softplus", "MixtureReLU", "Remax",
             "ClosedFormSoftmax", "EvenExp", "LayerBlock", "ResNetBlock", "Sequential")


def _count(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: {value!r}; expected an integer >= {minimum}")
    return value


def _init_method(value):
    if not isinstance(value, str) or value.lower() not in ("he", "xavier"):
        raise UnsupportedError(f"init_method {value!r}: the engine initialises with 'He' or "
                               f"'Xavier'")
    return "HE" if value.lower() == "he" else "XAVIER"


def _padding_type(value, padding, what):
    if padding == 0:
        return None
    if value == 1:
        return "SYMMETRIC"
    if value == 2:
        return "BOTTOM_RIGHT"
    raise UnsupportedError(f"{what}(padding={padding}, padding_type={value!r}): padding needs "
                           f"padding_type 1 (every side) or 2 (bottom and right only)")


class Layer:
    """A layer description. to_dict(shape) gives its job-file form."""

    # Per-layer initialisation (Linear and Conv2d): collected into the job's Init.
    init = None

    def to_dict(self, shape):
        raise NotImplementedError

    def children(self):
        return []

    def __repr__(self):
        return f"{type(self).__name__}()"


class _Activation(Layer):
    field = ""

    def __init__(self):
        pass

    def to_dict(self, shape):
        return {self.field: {}}


class ReLU(_Activation):
    field = "relu"


class Sigmoid(_Activation):
    field = "sigmoid"


class Tanh(_Activation):
    field = "tanh"


class Softplus(_Activation):
    field = "softplus"


class MixtureReLU(_Activation):
    field = "mixtureRelu"


class _OutputActivation(_Activation):
    """An output activation: only as the network's last layer (it sets the head)."""


class Remax(_OutputActivation):
    """pytagi's Remax(): class probabilities for a ONE_HOT classification head."""
    field = "remax"


class ClosedFormSoftmax(_OutputActivation):
    """pytagi's ClosedFormSoftmax(): class probabilities for a ONE_HOT classification head."""
    field = "closedFormSoftmax"


class EvenExp(_OutputActivation):
    """pytagi's EvenExp(): [mean, exp(log-noise)] pairs for a heteroscedastic regression head."""
    field = "evenExp"


class LeakyReLU(_Activation):
    """pytagi's LeakyReLU() (slope 0.1); negative_slope in (0, 1) is an extension."""

    def __init__(self, negative_slope=None):
        self.negative_slope = negative_slope

    def to_dict(self, shape):
        if self.negative_slope is None:
            return {"leakyRelu": {}}
        return {"leakyRelu": {"negativeSlope": float(self.negative_slope)}}


class Linear(Layer):
    def __init__(self, input_size, output_size, bias=True, gain_weight=1.0, gain_bias=1.0,
                 init_method="He"):
        self.input_size = _count("Linear input_size", input_size)
        self.output_size = _count("Linear output_size", output_size)
        if not bias:
            raise UnsupportedError("Linear(bias=False): the engine's Linear always has a bias")
        self.init = (_init_method(init_method), float(gain_weight), float(gain_bias))

    def to_dict(self, shape):
        return {"linear": {"inFeatures": self.input_size, "outFeatures": self.output_size}}


class Conv2d(Layer):
    def __init__(self, in_channels, out_channels, kernel_size, bias=True, stride=1, padding=0,
                 padding_type=1, in_width=0, in_height=0, gain_weight=1.0, gain_bias=1.0,
                 init_method="He"):
        self.in_channels = _count("Conv2d in_channels", in_channels)
        self.out_channels = _count("Conv2d out_channels", out_channels)
        self.kernel_size = _count("Conv2d kernel_size", kernel_size)
        self.stride = _count("Conv2d stride", stride)
        self.padding = _count("Conv2d padding", padding, 0)
        self.padding_type = _padding_type(padding_type, self.padding, "Conv2d")
        self.in_width = _count("Conv2d in_width", in_width, 0)
        self.in_height = _count("Conv2d in_height", in_height, 0) or self.in_width
        self.bias = bool(bias)
        self.init = (_init_method(init_method), float(gain_weight),
                     float(gain_bias) if self.bias else None)

    def input_shape(self):
        """(C, H, W) when in_width is given (pytagi's first layer), else None."""
        if not self.in_width:
            return None
        return (self.in_channels, self.in_height, self.in_width)

    def to_dict(self, shape):
        if self.in_width and shape is not None and (shape[1], shape[2]) != (
                self.in_height, self.in_width):
            raise ValueError(f"Conv2d(in_width={self.in_width}, in_height={self.in_height}): "
                             f"its input is {shape[1]}x{shape[2]} (height x width)")
        f = {"inChannels": self.in_channels, "outChannels": self.out_channels,
             "kernelSize": self.kernel_size}
        if self.stride != 1:
            f["stride"] = self.stride
        if self.padding:
            f["padding"] = self.padding
        if self.padding_type == "BOTTOM_RIGHT":
            f["paddingType"] = "BOTTOM_RIGHT"
        if not self.bias:
            f["bias"] = False
        return {"conv2d": f}


class _Pool(Layer):
    field = ""
    default_stride = 1

    def __init__(self, kernel_size, stride=None, padding=0, padding_type=0):
        name = type(self).__name__
        self.kernel_size = _count(f"{name} kernel_size", kernel_size)
        if stride is None:
            stride = self.default_stride
        self.stride = None if stride == -1 else _count(f"{name} stride", stride)
        self.padding = _count(f"{name} padding", padding, 0)
        self.padding_type = _padding_type(padding_type, self.padding, name)

    def to_dict(self, shape):
        f = {"kernelSize": self.kernel_size}
        if self.stride is not None:
            f["stride"] = self.stride
        if self.padding:
            f["padding"] = self.padding
            f["paddingType"] = self.padding_type
        return {self.field: f}


class AvgPool2d(_Pool):
    """pytagi's AvgPool2d(kernel_size, stride=-1, ...): -1 means stride = kernel_size."""
    field = "avgPool2d"
    default_stride = -1


class MaxPool2d(_Pool):
    """pytagi's MaxPool2d(kernel_size, stride=1, ...)."""
    field = "maxPool2d"
    default_stride = 1


class BatchNorm2d(Layer):
    def __init__(self, num_features, eps=1e-5, momentum=0.9, bias=True, gain_weight=1.0,
                 gain_bias=1.0):
        self.num_features = _count("BatchNorm2d num_features", num_features)
        self.eps = float(eps)
        self.momentum = float(momentum)
        self.bias = bool(bias)
        if float(gain_weight) != 1.0 or float(gain_bias) != 1.0:
            raise UnsupportedError(
                f"BatchNorm2d(gain_weight={gain_weight}, gain_bias={gain_bias}): the engine "
                f"initialises a normalisation's scale and shift with variance 1/C, no gain")

    def to_dict(self, shape):
        f = {}
        # The job format's 0 means "the input's channels"; the number is
        # written only when it cannot be checked here, so the server does.
        if shape is None or shape[0] != self.num_features:
            f["numFeatures"] = self.num_features
        if self.eps != 1e-5:
            f["eps"] = self.eps
        if self.momentum != 0.9:
            f["momentum"] = self.momentum
        if not self.bias:
            f["bias"] = False
        return {"batchNorm": f}


class LayerNorm(Layer):
    """pytagi's LayerNorm(normalized_shape, eps=1e-4, bias=True) (its Python default eps)."""

    def __init__(self, normalized_shape, eps=1e-4, bias=True):
        if isinstance(normalized_shape, int):
            normalized_shape = [normalized_shape]
        self.normalized_shape = [_count("LayerNorm normalized_shape", n) for n in normalized_shape]
        if len(self.normalized_shape) not in (1, 3):
            raise ValueError(f"LayerNorm normalized_shape {normalized_shape}: expected [F] or "
                             f"[C, H, W]")
        self.eps = float(eps)
        self.bias = bool(bias)

    def to_dict(self, shape):
        if shape is not None:
            c, h, w = shape
            fits = [[c]] if (h, w) == (1, 1) else [[c, h, w], [c, w, h]]
            if self.normalized_shape not in fits:
                raise ValueError(f"LayerNorm(normalized_shape={self.normalized_shape}): its "
                                 f"input has shape {fits[0]}")
        f = {"eps": self.eps}
        if not self.bias:
            f["bias"] = False
        return {"layerNorm": f}


class LayerBlock(Layer):
    def __init__(self, *layers):
        for layer in layers:
            if not isinstance(layer, Layer):
                raise TypeError(f"LayerBlock: {layer!r} is not a tagi_ddp.nn layer")
        self.layers = list(layers)

    def children(self):
        return self.layers

    def to_list(self, shape):
        return _layer_dicts(self.layers, shape)[0]

    def to_dict(self, shape):
        raise UnsupportedError("a LayerBlock outside a ResNetBlock: put its layers in the "
                               "Sequential directly")


class ResNetBlock(Layer):
    def __init__(self, main_block, shortcut=None):
        for b in (main_block, shortcut):
            if b is not None and not isinstance(b, Layer):
                raise TypeError(f"ResNetBlock: {b!r} is not a tagi_ddp.nn layer")
        self.main_block = main_block
        self.shortcut = shortcut

    def children(self):
        return [b for b in (self.main_block, self.shortcut) if b is not None]

    @staticmethod
    def _branch(block, shape):
        if isinstance(block, LayerBlock):
            return block.to_list(shape)
        return _layer_dicts([block], shape)[0]

    def to_dict(self, shape):
        r = {"main": self._branch(self.main_block, shape)}
        if self.shortcut is not None:
            r["shortcut"] = self._branch(self.shortcut, shape)
        return {"residual": r}


def _layer_dicts(layers, shape):
    """Job-file dicts of `layers` from input `shape` (None: unknown), and the output shape."""
    out = []
    for layer in layers:
        d = layer.to_dict(shape)
        out.append(d)
        if shape is not None:
            try:
                shape = shapes.infer_layer(d, shape)
            except shapes.ShapeError:
                shape = None  # the server names the problem at submission
    return out, shape


def _walk(layers):
    for layer in layers:
        yield layer
        yield from _walk(layer.children())


def _resolve_init(layers):
    """The job's Init from the layers' (method, gain_weight, gain_bias)."""
    found = {"method": set(), "gain_weight": set(), "gain_bias": set()}
    for layer in _walk(layers):
        if layer.init is None:
            continue
        method, gw, gb = layer.init
        found["method"].add(method)
        found["gain_weight"].add(gw)
        if gb is not None:
            found["gain_bias"].add(gb)
    for key, values in found.items():
        if len(values) > 1:
            raise UnsupportedError(f"layers ask for different {key} values {sorted(values)}; the "
                                   f"engine initialises every layer with one (Init.{key})")
    init = {"method": next(iter(found["method"]), "HE")}
    if found["gain_weight"] and next(iter(found["gain_weight"])) != 1.0:
        init["gainWeight"] = next(iter(found["gain_weight"]))
    if found["gain_bias"] and next(iter(found["gain_bias"])) != 1.0:
        init["gainBias"] = next(iter(found["gain_bias"]))
    return init


class Sequential:
    """pytagi's Sequential(*layers): here a network description that becomes a JobSpec."""

    def __init__(self, *layers):
        for layer in layers:
            if not isinstance(layer, Layer):
                raise TypeError(f"Sequential: {layer!r} is not a tagi_ddp.nn layer")
        if not layers:
            raise ValueError("Sequential: no layers")
        self.layers = list(layers)

    def input_shape(self):
        """The input (C, H, W) the first layer states (a Linear: flat), or None."""
        first = self.layers[0]
        if isinstance(first, Conv2d):
            return first.input_shape()
        if isinstance(first, Linear):
            return (first.input_size, 1, 1)
        return None

    def layer_dicts(self, input_shape=None):
        shape = tuple(input_shape) if input_shape else self.input_shape()
        return _layer_dicts(self.layers, shape)

    def _head(self, num_classes, out_shape):
        """The job's head from num_classes and the last layer; ValueError where they
        cannot go together (the server checks too; this names the fix)."""
        for i, layer in enumerate(self.layers):
            inner = [l for l in _walk(layer.children()) if isinstance(l, _OutputActivation)]
            if inner or (isinstance(layer, _OutputActivation) and i + 1 < len(self.layers)):
                what = type(inner[0] if inner else layer).__name__
                raise ValueError(f"layers[{i}]: {what} is an output activation; it may only be "
                                 f"the network's last layer")
        last = self.layers[-1]
        width = None
        if out_shape is not None:
            width = out_shape[0] * out_shape[1] * out_shape[2]
        elif len(self.layers) > 1 and isinstance(self.layers[-2], Linear):
            width = self.layers[-2].output_size
        at = f"layers[{len(self.layers) - 1}] ({type(last).__name__})"
        if num_classes is not None:
            k = int(num_classes)
            if isinstance(last, EvenExp):
                raise ValueError(f"{at}: EvenExp is the heteroscedastic regression head's "
                                 f"output; with num_classes={k} end with Remax() or "
                                 f"ClosedFormSoftmax() (one-hot) or a Linear (hierarchical "
                                 f"softmax), or leave num_classes out for regression")
            if isinstance(last, (Remax, ClosedFormSoftmax)):
                if width is not None and width != k:
                    raise ValueError(f"{at}: one-hot classification over {k} classes needs "
                                     f"{k} outputs (the last Linear's output_size), but the "
                                     f"network gives {width}")
                return {"classification": {"numClasses": k, "output": "ONE_HOT"}}
            return {"classification": {"numClasses": k}}
        if isinstance(last, (Remax, ClosedFormSoftmax)):
            raise ValueError(f"{at}: {type(last).__name__} gives class probabilities; pass "
                             f"num_classes (a one-hot classification head)")
        if isinstance(last, EvenExp):
            if len(self.layers) < 2 or isinstance(self.layers[-2], _Activation):
                raise ValueError(f"{at}: EvenExp must follow a layer with parameters (e.g. "
                                 f"Linear(n, 2 * targets)), not an activation")
            if width is not None and width % 2:
                raise ValueError(f"{at}: EvenExp takes [mean, log-noise] pairs (2 outputs "
                                 f"per target); the network gives {width}, an odd number")
            return {"regression": {"heteroscedastic": True}}
        return {"regression": {}}

    def to_job_dict(self, *, name, data, sigma_v=None, batch_size, epochs, num_classes=None,
                    input_shape=None, sigma_v_decay=None, sigma_v_min=None, seed=None,
                    reduction=None, snapshot_interval=None, world_size=None, device=None,
                    backend=None, sync_batch_norm=False, init_from=None,
                    min_world_size=None, max_world_size=None):
        """The job in the JSON form of the job files (examples/*.json).

        num_classes: classification over that many classes: one-hot when the
        network ends with Remax() or ClosedFormSoftmax() (the last Linear has
        num_classes outputs), else hierarchical softmax (the last layer has
        hsm_output_width(num_classes) units, 11 for 10); None: Gaussian
        regression, heteroscedastic when the network ends with EvenExp() (two
        outputs per target). sigma_v: the observation noise's standard
        deviation; None only for a heteroscedastic head (which learns its
        noise: the job then has no "noise"). data: a DataSpec dict
        (tagi_ddp.data). input_shape (C, H, W): needed only when the first
        layer does not state it (a Conv2d without in_width, a block).
        init_from: a model file to start from instead of the seed's draw
        (JobSpec.init_from: its parameters and running statistics; its network
        must be this one). The path is read where the job runs: by tagi-train,
        or by every worker, under its --data-root. A file written by
        tagi_ddp.pytagi_format.from_pytagi starts a job from pytagi's training.
        min_world_size / max_world_size: an elastic job (world_size must then
        be None): it runs with as few as the minimum and grows to the maximum
        at snapshot points when workers are idle (docs/fault-tolerance.md "Elastic jobs").
        """
        if world_size is not None and (min_world_size is not None or
                                       max_world_size is not None):
            raise ValueError("world_size and min_world_size/max_world_size exclude each other: "
                             "an elastic job sets its bounds instead")
        shape = tuple(input_shape) if input_shape else self.input_shape()
        layers, out_shape = _layer_dicts(self.layers, shape)
        job = {"name": name}
        if shape is not None:
            job["input"] = {"channels": shape[0], "height": shape[1], "width": shape[2]}
        job["layers"] = layers
        job["head"] = self._head(num_classes, out_shape)
        job["data"] = dict(data)
        job["init"] = _resolve_init(self.layers)
        if sigma_v is None:
            if not job["head"].get("regression", {}).get("heteroscedastic"):
                raise ValueError("sigma_v: None; only a heteroscedastic regression head (a "
                                 "network ending with EvenExp) learns its noise instead")
            if sigma_v_decay is not None or sigma_v_min is not None:
                raise ValueError("sigma_v_decay / sigma_v_min schedule sigma_v, which is None")
        else:
            noise = {"sigmaV": float(sigma_v)}
            if sigma_v_decay is not None:
                noise["decay"] = float(sigma_v_decay)
            if sigma_v_min is not None:
                noise["sigmaVMin"] = float(sigma_v_min)
            job["noise"] = noise
        job["batchSize"] = int(batch_size)
        job["epochs"] = int(epochs)
        optional = {"seed": seed, "reduction": reduction, "worldSize": world_size,
                    "minWorldSize": min_world_size, "maxWorldSize": max_world_size,
                    "snapshotInterval": snapshot_interval, "device": device, "backend": backend}
        job.update({k: v for k, v in optional.items() if v is not None})
        if sync_batch_norm:
            job["syncBatchNorm"] = True
        if init_from is not None:
            job["initFrom"] = str(init_from)
        return job

    def to_job_json(self, **kwargs):
        return json.dumps(self.to_job_dict(**kwargs), indent=2)

    def to_job_spec(self, **kwargs):
        """The job as a tagi.v1.JobSpec message (the arguments of to_job_dict)."""
        from google.protobuf import json_format
        from ._stubs import job_pb2
        return json_format.ParseDict(self.to_job_dict(**kwargs), job_pb2.JobSpec())

    def __repr__(self):
        return "Sequential(" + ", ".join(repr(l) for l in self.layers) + ")"


def _unsupported(name):
    def __init__(self, *args, **kwargs):
        raise UnsupportedError(
            f"{name} is a pytagi layer that the tagi-ddp engine does not run; the engine runs "
            f"{', '.join(SUPPORTED)}")
    return type(name, (Layer,), {"__init__": __init__, "__doc__": f"pytagi's {name}: refused."})


# pytagi 0.2.1's other layers: importable (so a script's import line works)
# and refused when constructed, with the list of what is supported.
for _name in ("MixtureSigmoid", "MixtureTanh", "Softmax", "ConvTranspose2d", "Embedding",
              "LSTM", "SLSTM", "SLinear", "RMSNorm", "MultiheadAttention", "PositionalEncoding"):
    globals()[_name] = _unsupported(_name)
del _name

__all__ = list(SUPPORTED) + ["UnsupportedError", "MixtureSigmoid", "MixtureTanh", "Softmax",
                             "ConvTranspose2d", "Embedding", "LSTM", "SLSTM", "SLinear"]

def hsm_output_width(num_classes):
    """The last layer's width for hierarchical softmax over num_classes (11 for 10)."""
    return shapes.hsm_output_width(num_classes)
