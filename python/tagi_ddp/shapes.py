"""Shape inference over layers in the job files' JSON form.

A layer is a dict of the proto3 JSON mapping of tagi.v1.Layer's oneof form,
as the job files in examples/ write it: {"linear": {"inFeatures": 784,
"outFeatures": 100}}, {"relu": {}}, {"residual": {"main": [...]}}. A shape is
(channels, height, width); flat data is (features, 1, 1).

The rules are those of spec/kinds/*.cc (the server's validation is the
authority; this copy lets the builder fill in defaults and lets the model
reader lay out parameters). Pure functions.
"""

ACTIVATIONS = ("relu", "leakyRelu", "sigmoid", "tanh", "softplus", "mixtureRelu")
POOLS = ("avgPool2d", "maxPool2d")
# The heads' output activations (docs/heads.md): only as the network's last
# layer, under the head that reads them (spec/network.cc; the server checks).
OUTPUT_ACTIVATIONS = ("remax", "closedFormSoftmax", "evenExp")


class ShapeError(ValueError):
    """A layer that does not fit its input; the message names its path."""


def kind_of(layer):
    """The oneof field a layer dict sets ("linear", "conv2d", ...)."""
    keys = [k for k in layer if k not in ("kind", "inFeatures", "outFeatures", "negativeSlope")]
    if len(keys) != 1:
        raise ShapeError(f"a layer sets {sorted(layer)}; expected exactly one kind")
    return keys[0]


def window(fields, default_stride, default_type):
    """(kernel, stride, padding, pad_before, pad_total) of a conv or pool dict."""
    kernel = int(fields.get("kernelSize", 0))
    stride = int(fields.get("stride", default_stride if default_stride else kernel))
    padding = int(fields.get("padding", 0))
    ptype = fields.get("paddingType", default_type)
    if ptype in ("SYMMETRIC", 1):
        return kernel, stride, padding, padding, 2 * padding
    if ptype in ("BOTTOM_RIGHT", 2):
        return kernel, stride, padding, 0, padding
    return kernel, stride, padding, 0, 0


def _axis(size, kernel, stride, pad_total, axis, path):
    span = size + pad_total - kernel
    if kernel < 1 or stride < 1:
        raise ShapeError(f"{path}: kernel_size {kernel} and stride {stride} must be at least 1")
    if span < 0:
        raise ShapeError(f"{path}.kernel_size: {kernel} is larger than its input's {axis} of "
                         f"{size} ({size + pad_total} with padding)")
    if span % stride:
        raise ShapeError(f"{path}.stride: {axis} {size} + padding {pad_total} - kernel {kernel} "
                         f"= {span} is not a multiple of stride {stride}")
    return span // stride + 1


def _window_shape(fields, shape, channels, default_stride, default_type, path):
    kernel, stride, padding, _, pad_total = window(fields, default_stride, default_type)
    if padding > 0 and pad_total == 0:
        raise ShapeError(f"{path}.padding_type: padding {padding} needs a padding type")
    if padding >= kernel >= 1:
        raise ShapeError(f"{path}.padding: {padding}; expected less than the kernel size {kernel} "
                         f"(a window of padding alone)")
    h = _axis(shape[1], kernel, stride, pad_total, "height", path)
    w = _axis(shape[2], kernel, stride, pad_total, "width", path)
    return (channels, h, w)


def infer_layer(layer, shape, path="layers[0]"):
    """The output shape of one layer dict on input `shape`; ShapeError if it does not fit."""
    kind = kind_of(layer)
    f = layer[kind] or {}
    size = shape[0] * shape[1] * shape[2]
    if kind == "linear":
        if int(f.get("inFeatures", 0)) != size:
            raise ShapeError(f"{path}.in_features: {f.get('inFeatures', 0)} does not match its "
                             f"input, which has {size} features")
        return (int(f.get("outFeatures", 0)), 1, 1)
    if kind in ACTIVATIONS or kind == "layerNorm":
        return shape
    if kind in OUTPUT_ACTIVATIONS:
        if kind == "evenExp" and size % 2:
            raise ShapeError(f"{path}: evenExp takes [mean, log-noise] pairs; its input has "
                             f"{size} units, an odd number")
        return shape
    if kind == "conv2d":
        if int(f.get("inChannels", 0)) != shape[0]:
            raise ShapeError(f"{path}.in_channels: {f.get('inChannels', 0)} does not match its "
                             f"input, which has {shape[0]} channels")
        return _window_shape(f, shape, int(f.get("outChannels", 0)), 1, "SYMMETRIC", path)
    if kind in POOLS:
        return _window_shape(f, shape, shape[0], None, None, path)
    if kind == "batchNorm":
        n = int(f.get("numFeatures", 0))
        if n not in (0, shape[0]):
            raise ShapeError(f"{path}.num_features: {n} does not match its input, which has "
                             f"{shape[0]} {'features' if shape[1:] == (1, 1) else 'channels'}")
        return shape
    if kind == "residual":
        main = infer_sequence(f.get("main", []), shape, path + ".residual.main")
        shortcut = infer_sequence(f.get("shortcut", []), shape, path + ".residual.shortcut")
        if main != shortcut:
            raise ShapeError(f"{path}.residual: the main branch ends in shape {main} but the "
                             f"shortcut in {shortcut}; the two are added, so they must match")
        return main
    raise ShapeError(f"{path}: unknown layer kind {kind!r}")


def infer_sequence(layers, shape, path="layers"):
    for i, layer in enumerate(layers):
        shape = infer_layer(layer, shape, f"{path}[{i}]")
    return shape


def hsm_output_width(num_classes):
    """Output units of hierarchical softmax over K classes (common/hsm_tree.cc)."""
    levels = 0
    while (1 << levels) < num_classes:
        levels += 1
    return sum(((num_classes - 1) >> (levels - l)) + 1 for l in range(levels))
