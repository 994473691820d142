"""tagi-ddp model files in numpy: read them, and predict with them.

    model = load_model("job-1.tagi")
    model.layers[0].mu_w, model.layers[0].var_w      # a Linear's weights, [out][in]
    mu, var = model.predict(x)                       # regression: [n][targets], data units
    probs = model.class_probabilities(x)             # classification, [n][K]

The file format is worker/engine/model_file.h's (versions 1 to 3; all
little-endian, CRC-32 at the end): the architecture as a tagi.v1.Network,
the input and target standardisation, the parameter arena [means][variances]
(every layer's blocks depth first in layer order, packed: spec/plan.h) and
the state arena (a batch norm's running mean, running variance and
first-batch flag); version 3 adds the class names (a model trained on an
image folder: model.class_names, model.predict_names(x)).

Heads (docs/heads.md): classification by hierarchical softmax (the output
units are tree nodes) or ONE_HOT (the network ends with remax or
closedFormSoftmax: the class probabilities are the output means, clipped at
0 and normalised, as worker/engine/output.cc MeanClassProbabilities);
regression, homoscedastic (sigma_v given to predict) or heteroscedastic (the
network ends with evenExp: [mean, noise] unit pairs, predictive variance
var(mean) + E[noise], no sigma_v).

Predictions follow the CPU engine in evaluation mode (worker/engine/*.cc,
docs/maths.md): every kind of layer the engine runs, in
float64 (the engine computes in float32, so values agree to float32's
precision, not bit for bit). The samples pass BATCH_SIZE at a time (forward's
batch_size), as [n][H][W][C] maps; a convolution is one matrix product per
moment over its windows (im2col), so predicting is about as fast as
tagi-train --eval on the same model (bench/python_predict.py).
"""
import math
import struct
import zlib

import numpy as np

from . import shapes

MAGIC = b"TAGIMODL"
HSM_ALPHA = 3.0
MIN_STDDEV = 1e-8
MIXTURE_FLOOR = 1e-6
REMAX_FLOOR = 1e-6  # worker/engine/heads.h kRemaxFloor
BATCH_SIZE = 64  # samples per pass of Model.forward
KIND_NAMES = {1: "linear", 2: "relu", 3: "leakyRelu", 4: "sigmoid", 5: "tanh", 6: "softplus",
              7: "mixtureRelu"}


class ModelFileError(ValueError):
    """A file that is not a readable tagi-ddp model file; the message says why."""


class _Reader:
    def __init__(self, data, what):
        self.data = data
        self.at = 0
        self.what = what

    def take(self, n, what):
        if n > len(self.data) - self.at:
            raise ModelFileError(f"{self.what}: truncated in {what}")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u8(self, what):
        return self.take(1, what)[0]

    def u32(self, what):
        return struct.unpack("<I", self.take(4, what))[0]

    def u64(self, what):
        return struct.unpack("<Q", self.take(8, what))[0]

    def f32(self, what):
        return struct.unpack("<f", self.take(4, what))[0]

    def floats(self, n, what):
        return np.frombuffer(self.take(4 * n, what), dtype="<f4").astype(np.float32)


class LayerParams:
    """One planned layer (nested ones included): its spec and its numpy blocks.

    path: "layers[3].residual.main[0]"; kind: the job-file field ("conv2d");
    spec: its job-file dict; in_shape / out_shape: (C, H, W). Parameters as
    pytagi names them: mu_w, var_w (Linear [out][in], Conv2d
    [out][in][k][k], norms' scale gamma [C]) and mu_b, var_b (bias or shift;
    None when the layer has none). state: a batch norm's mu_ra, var_ra
    (running statistics) and first_batch (1 until its first training batch).
    """

    def __init__(self, path, kind, spec, in_shape, out_shape):
        self.path = path
        self.kind = kind
        self.spec = spec
        self.in_shape = in_shape
        self.out_shape = out_shape
        self.mu_w = self.var_w = self.mu_b = self.var_b = None
        self.state = {}

    def __repr__(self):
        return f"LayerParams({self.path}: {self.kind} {self.in_shape} -> {self.out_shape})"


def _blocks(kind, spec, in_shape):
    """[(name, shape)] of a layer's parameter blocks, in arena order (spec/kinds/*.cc)."""
    if kind == "linear":
        i, o = int(spec.get("inFeatures", 0)), int(spec.get("outFeatures", 0))
        return [("w", (o, i)), ("b", (o,))]
    if kind == "conv2d":
        k = int(spec["kernelSize"])
        w = ("w", (int(spec["outChannels"]), int(spec["inChannels"]), k, k))
        return [w, ("b", (int(spec["outChannels"]),))] if spec.get("bias", True) else [w]
    if kind in ("batchNorm", "layerNorm"):
        c = in_shape[0]
        return [("w", (c,)), ("b", (c,))] if spec.get("bias", True) else [("w", (c,))]
    return []


def _states(kind, in_shape):
    if kind == "batchNorm":
        c = in_shape[0]
        return [("mu_ra", c), ("var_ra", c), ("first_batch", 1)]
    return []


class Model:
    """A decoded model file. Attributes: version, input_shape, layers (the
    network's layer dicts, blocks nested), head ({"classification":
    {"numClasses": K}} or {"regression": {}}), planned (LayerParams, depth
    first), input_mean/input_std/target_mean/target_std, mu/var (the
    parameter arena's halves) and state (the state arena). A head may also be
    {"classification": {"numClasses": K, "output": "ONE_HOT"}} or
    {"regression": {"heteroscedastic": True}} (see one_hot, heteroscedastic)."""

    def __init__(self, version, network, prep, mu, var, state, class_names=()):
        self.version = version
        self.class_names = list(class_names)
        inp = network.get("input", {})
        self.input_shape = (int(inp.get("channels", 0)), int(inp.get("height", 1) or 1),
                            int(inp.get("width", 1) or 1))
        self.layers = network.get("layers", [])
        self.head = network.get("head", {})
        self.input_mean, self.input_std, self.target_mean, self.target_std = prep
        self.mu, self.var, self.state = mu, var, state
        self.planned = []
        self._tree = None
        try:
            self.output_shape = self._plan(self.layers, self.input_shape, "layers", [0, 0])
        except shapes.ShapeError as e:
            raise ModelFileError(f"model file holds an invalid architecture: {e}") from None
        if self.num_classes and not self.one_hot:
            self._tree = HsmTree(self.num_classes)

    @property
    def num_classes(self):
        return int(self.head.get("classification", {}).get("numClasses", 0))

    @property
    def one_hot(self):
        """A classification head with one output per class (ONE_HOT), not hierarchical."""
        return self.head.get("classification", {}).get("output") in ("ONE_HOT", 2)

    @property
    def heteroscedastic(self):
        """A regression head with [mean, noise] output pairs that learns its noise."""
        return bool(self.head.get("regression", {}).get("heteroscedastic", False))

    def _plan(self, layers, shape, path, cursor):
        for i, layer in enumerate(layers):
            at = f"{path}[{i}]"
            kind = shapes.kind_of(layer)
            spec = layer[kind] or {}
            if kind == "residual":
                main = self._plan(spec.get("main", []), shape, at + ".residual.main", cursor)
                self._plan(spec.get("shortcut", []), shape, at + ".residual.shortcut", cursor)
                shape = shapes.infer_layer(layer, shape, at)
                assert shape == main
                continue
            out = shapes.infer_layer(layer, shape, at)
            lp = LayerParams(at, kind, spec, shape, out)
            for name, block_shape in _blocks(kind, spec, shape):
                n = int(np.prod(block_shape))
                if cursor[0] + n > len(self.mu):
                    raise ModelFileError(f"model file holds {len(self.mu)} parameters; its "
                                         f"architecture needs more")
                setattr(lp, "mu_" + name, self.mu[cursor[0]:cursor[0] + n].reshape(block_shape))
                setattr(lp, "var_" + name, self.var[cursor[0]:cursor[0] + n].reshape(block_shape))
                cursor[0] += n
            for name, n in _states(kind, shape):
                lp.state[name] = self.state[cursor[1]:cursor[1] + n]
                cursor[1] += n
            self.planned.append(lp)
            shape = out
        if path == "layers" and (cursor[0] != len(self.mu) or cursor[1] != len(self.state)):
            raise ModelFileError(
                f"model file holds {len(self.mu)} parameters and {len(self.state)} state values; "
                f"its architecture has {cursor[0]} and {cursor[1]}")
        return shape

    # --- prediction -------------------------------------------------------

    def standardize(self, x):
        x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        if x.shape[1] != np.prod(self.input_shape):
            raise ValueError(f"inputs have {x.shape[1]} values per sample; the model takes "
                             f"{int(np.prod(self.input_shape))} ({self.input_shape})")
        if len(self.input_mean):
            std = np.where(self.input_std < MIN_STDDEV, 1.0, self.input_std)
            x = (x - self.input_mean) / std
        return x

    def forward(self, x, standardize=True, batch_size=BATCH_SIZE):
        """Output units (mu, var), [n][width], in the network's own (standardised) units.

        The samples go through the network batch_size at a time (evaluation mode
        treats every sample alone, so the result does not depend on it): small
        enough batches keep a convolution's windows in the processor's caches."""
        x = self.standardize(x) if standardize else np.asarray(x, dtype=np.float64)
        n = len(x)
        width = int(np.prod(self.output_shape))
        out_mu, out_var = np.empty((n, width)), np.empty((n, width))
        step = max(1, int(batch_size))
        for at in range(0, n, step):
            mu = _maps(x[at:at + step], self.input_shape)
            mu, var = _run(self.layers, mu, np.zeros_like(mu), iter(self.planned))
            out_mu[at:at + step] = _flat(mu)
            out_var[at:at + step] = _flat(var)
        return out_mu, out_var

    def predict(self, x, sigma_v=0.0, standardize=True, batch_size=BATCH_SIZE):
        """Regression: predictive (mean, variance) [n][targets] in the data's units:
        homoscedastic, the output's variance plus sigma_v^2; heteroscedastic (its
        output pairs [mean, noise]), var(mean) + E[noise] (sigma_v is not used).
        Classification: the output units as forward() gives them."""
        mu, var = self.forward(x, standardize, batch_size)
        if self.num_classes:
            return mu, var
        if self.heteroscedastic:
            mu, var = mu[:, 0::2], var[:, 0::2] + mu[:, 1::2]
        else:
            var = var + sigma_v * sigma_v
        if len(self.target_mean):
            std = np.where(self.target_std < MIN_STDDEV, 1.0, self.target_std)
            mu, var = mu * std + self.target_mean, var * std * std
        return mu, var

    def class_probabilities(self, x, standardize=True, batch_size=BATCH_SIZE):
        """[n][K] class probabilities (worker/engine/output.cc): the hierarchical
        softmax's, or a ONE_HOT head's output means clipped at 0 and normalised."""
        if not self.num_classes:
            raise ValueError("a regression model has no class probabilities")
        mu, var = self.forward(x, standardize, batch_size)
        if self.one_hot:
            return mean_class_probabilities(mu)
        return self._tree.probabilities(mu, var)

    def predict_classes(self, x, standardize=True):
        return np.argmax(self.class_probabilities(x, standardize), axis=1)

    def predict_names(self, x, standardize=True):
        """The class name of each sample's most probable class (a model whose file
        stores names: one trained on an image folder)."""
        if not self.class_names:
            raise ValueError("this model file stores no class names")
        return [self.class_names[k] for k in self.predict_classes(x, standardize)]


# The forward pass holds a layer's inputs and outputs as [n][H][W][C] (flat
# features: [n][1][1][F]), so that a convolution's windows are rows of
# consecutive values and its product comes out in that layout; the engine's
# order of units, [C][H][W], is taken where it matters (_flat: a Linear's
# inputs, evenExp's pairs, the outputs).

def _maps(x, shape):
    """Flat samples [n][C * H * W] (the engine's order) as [n][H][W][C]."""
    return x.reshape((-1,) + tuple(shape)).transpose(0, 2, 3, 1)


def _flat(x):
    """[n][H][W][C] as flat samples [n][C * H * W] in the engine's order."""
    if x.shape[1] == x.shape[2] == 1:
        return x.reshape(len(x), -1)
    return x.transpose(0, 3, 1, 2).reshape(len(x), -1)


def _run(layers, mu, var, planned):
    for layer in layers:
        kind = shapes.kind_of(layer)
        if kind == "residual":
            spec = layer[kind]
            m_mu, m_var = _run(spec.get("main", []), mu, var, planned)
            if spec.get("shortcut"):
                s_mu, s_var = _run(spec["shortcut"], mu, var, planned)
            else:
                s_mu, s_var = mu, var
            mu, var = m_mu + s_mu, m_var + s_var
        else:
            mu, var = _FORWARD[kind](next(planned), mu, var)
    return mu, var


def _linear(lp, mu, var):
    n = len(mu)
    a, v = _flat(mu), _flat(var)
    w, vw = lp.mu_w.astype(np.float64).T, lp.var_w.astype(np.float64).T
    mu_z = a @ w + lp.mu_b
    var_z = (a * a) @ vw + lp.var_b
    if var.any():
        var_z += v @ (w * w + vw)
    return mu_z.reshape(n, 1, 1, -1), var_z.reshape(n, 1, 1, -1)


def _padded(x, spec, pad_value, default_stride, default_type):
    """(x [n][H][W][C] padded as the layer pads it, kernel, stride, output height,
    output width)."""
    k, s, _, before, total = shapes.window(spec, default_stride, default_type)
    if total:
        after = total - before
        x = np.pad(x, ((0, 0), (before, after), (before, after), (0, 0)),
                   constant_values=pad_value)
    return x, k, s, (x.shape[1] - k) // s + 1, (x.shape[2] - k) // s + 1


def _cells(xp, k, s, ho, wo):
    """The k * k cells of every window, in scan order (row, then column): per cell
    (i, j) the view xp[:, i + s * oh, j + s * ow, :] over the outputs, [n][Ho][Wo][C]."""
    for i in range(k):
        for j in range(k):
            yield xp[:, i:i + s * (ho - 1) + 1:s, j:j + s * (wo - 1) + 1:s]


def _im2col(xp, k, s, ho, wo):
    """The windows of xp [n][H][W][C] as rows [n * Ho * Wo][C * k * k], a row's
    columns in the kernel's [in][row][column] order (one copy of the data)."""
    n, c = len(xp), xp.shape[3]
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(1, 2))[:, ::s, ::s]
    return win.reshape(n * ho * wo, c * k * k)  # win: [n][Ho][Wo][C][k][k]


def _conv2d(lp, mu, var):
    """A convolution as matrix products over the windows (im2col): mu_z = A W,
    var_z = A^2 S_w + V (W^2 + S_w), plus the bias; V's product is skipped while
    the inputs carry no variance (the data)."""
    n = len(mu)
    out_c = lp.out_shape[0]
    pm, k, s, ho, wo = _padded(mu, lp.spec, 0.0, 1, "SYMMETRIC")
    w = lp.mu_w.astype(np.float64).reshape(out_c, -1).T  # [C * k * k][out]
    vw = lp.var_w.astype(np.float64).reshape(out_c, -1).T
    cols = _im2col(pm, k, s, ho, wo)
    mu_z = cols @ w
    np.square(cols, out=cols)
    var_z = cols @ vw
    if var.any():
        pv = _padded(var, lp.spec, 0.0, 1, "SYMMETRIC")[0]
        var_z += _im2col(pv, k, s, ho, wo) @ (w * w + vw)
    if lp.mu_b is not None:
        mu_z += lp.mu_b
        var_z += lp.var_b
    return mu_z.reshape(n, ho, wo, out_c), var_z.reshape(n, ho, wo, out_c)


def _avg_pool(lp, mu, var):
    pm, k, s, ho, wo = _padded(mu, lp.spec, 0.0, None, None)
    pv = _padded(var, lp.spec, 0.0, None, None)[0]
    k2 = float(k * k)
    return _window_sum(pm, k, s, ho, wo) / k2, _window_sum(pv, k, s, ho, wo) / (k2 * k2)


def _window_sum(xp, k, s, ho, wo):
    cells = _cells(xp, k, s, ho, wo)
    total = next(cells).copy()
    for cell in cells:
        total += cell
    return total


def _max_pool(lp, mu, var):
    """The first cell (in scan order) with the largest mean, and its variance;
    padding (-inf) never wins."""
    pm, k, s, ho, wo = _padded(mu, lp.spec, -np.inf, None, None)
    pv = _padded(var, lp.spec, 0.0, None, None)[0]
    best_mu = best_var = None
    for cell_mu, cell_var in zip(_cells(pm, k, s, ho, wo), _cells(pv, k, s, ho, wo)):
        if best_mu is None:
            best_mu, best_var = cell_mu.copy(), cell_var.copy()
            continue
        wins = cell_mu > best_mu
        np.copyto(best_mu, cell_mu, where=wins)
        np.copyto(best_var, cell_var, where=wins)
    return best_mu, best_var


def _normalise(lp, mu, var, mean, r):
    """gamma * (input standardised by mean, r) + beta; per channel (docs/maths.md 12.1):
    mu_z = r gamma (mu - mean) + beta,
    var_z = r^2 (var (gamma^2 + S_gamma) + S_gamma (mu - mean)^2) + S_beta."""
    mg, vg = lp.mu_w.astype(np.float64), lp.var_w.astype(np.float64)
    centred = mu - mean
    mu_z = centred * (r * mg)
    var_z = var * (r * r * (mg * mg + vg))
    np.square(centred, out=centred)
    centred *= r * r * vg
    var_z += centred
    if lp.mu_b is not None:
        mu_z += lp.mu_b
        var_z += lp.var_b
    return mu_z, var_z


def _batch_norm(lp, mu, var):
    eps = float(lp.spec.get("eps", 1e-5))
    mean = lp.state["mu_ra"].astype(np.float64)
    r = 1.0 / np.sqrt(lp.state["var_ra"].astype(np.float64) + eps)
    return _normalise(lp, mu, var, mean, r)


def _layer_norm(lp, mu, var):
    eps = float(lp.spec.get("eps", 1e-5))
    n = len(mu)
    count = mu[0].size
    flat_m, flat_v = mu.reshape(n, -1), var.reshape(n, -1)
    mean = flat_m.mean(axis=1)
    spread = ((flat_m - mean[:, None]) ** 2).sum(axis=1)
    s_var = (spread + flat_v.sum(axis=1)) / (max(count, 2) - 1)
    r = (1.0 / np.sqrt(s_var + eps)).reshape(n, 1, 1, 1)
    return _normalise(lp, mu, var, mean.reshape(n, 1, 1, 1), r)


_erfc = np.frompyfunc(math.erfc, 1, 1)


def erfc(x):
    return _erfc(np.asarray(x, dtype=np.float64)).astype(np.float64)


def _mixture_relu(mu, var):
    sd = np.sqrt(np.maximum(var, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.where(var > 0, mu / np.where(sd > 0, sd, 1.0), 0.0)
    cdf = 0.5 * erfc(-alpha / math.sqrt(2.0))
    pdf = np.exp(-0.5 * alpha * alpha) / math.sqrt(2.0 * math.pi)
    mu_a = mu * cdf + sd * pdf
    var_a = (mu * mu + var) * cdf + mu * sd * pdf - mu_a * mu_a
    det_mu = np.maximum(mu, MIXTURE_FLOOR)  # zero variance: the engine's branch
    mu_a = np.where(var > 0, np.maximum(mu_a, MIXTURE_FLOOR), det_mu)
    var_a = np.where(var > 0, np.maximum(var_a, MIXTURE_FLOOR), MIXTURE_FLOOR)
    return mu_a, var_a


def _activation(kind):
    """Moments through an activation (worker/engine/elementwise.h Activate)."""
    def run(lp, mu, var):
        if kind == "relu":
            on = mu > 0
            return np.where(on, mu, 0.0), np.where(on, var, 0.0)
        if kind == "leakyRelu":
            slope = float(lp.spec.get("negativeSlope", 0.1))
            on = mu > 0
            return np.where(on, mu, slope * mu), np.where(on, var, slope * slope * var)
        if kind == "sigmoid":
            s = 1.0 / (1.0 + np.exp(-mu))
            d = s * (1.0 - s)
            return s, d * d * var
        if kind == "tanh":
            t = np.tanh(mu)
            d = 1.0 - t * t
            return t, d * d * var
        if kind == "softplus":
            sp = np.logaddexp(0.0, mu)
            d = 1.0 / (1.0 + np.exp(-mu))
            return sp, d * d * var
        return _mixture_relu(mu, var)
    return run


def _log_normal(mu, var):
    """(mean, variance) of log X for a positive X of moments mu, var (log-normal matching)."""
    vl = np.log1p(var / (mu * mu))
    return np.log(mu) - 0.5 * vl, vl


def _remax(lp, mu, var):
    """REMAX over each sample's units (worker/engine/heads.h RemaxRow; docs/maths.md 5.2)."""
    shape = mu.shape
    m_mu, m_var = _mixture_relu(mu.reshape(len(mu), -1), var.reshape(len(var), -1))
    mu_t = m_mu.sum(axis=1, keepdims=True)
    ml_t, vl_t = _log_normal(mu_t, m_var.sum(axis=1, keepdims=True))
    ml, vl = _log_normal(m_mu, m_var)
    cov = np.log1p(m_var / (mu_t * m_mu))
    ml_a = ml - ml_t
    vl_a = vl + vl_t - 2.0 * cov
    a = np.maximum(np.exp(ml_a + 0.5 * vl_a), REMAX_FLOOR)
    mu_a = a / a.sum(axis=1, keepdims=True)
    var_a = np.expm1(vl_a) * mu_a * mu_a
    return mu_a.reshape(shape), var_a.reshape(shape)


def _closed_form_softmax(lp, mu, var):
    """CLOSED_FORM_SOFTMAX over each sample's units (heads.h ClosedFormSoftmaxRow;
    docs/maths.md 5.3): not renormalised; shifted by the row's largest mu + var / 2,
    which changes none of the moments and keeps every mu_e at most 1 (exp does not
    overflow for large output variances)."""
    shape = mu.shape
    m = mu.reshape(len(mu), -1)
    v = var.reshape(len(var), -1)
    m = m - (m + 0.5 * v).max(axis=1, keepdims=True)
    mu_e = np.exp(m + 0.5 * v)
    var_e = mu_e * mu_e * np.expm1(v)
    mu_s = mu_e.sum(axis=1, keepdims=True)
    ml_s, vl_s = _log_normal(mu_s, var_e.sum(axis=1, keepdims=True))
    c = np.log1p(mu_e * np.expm1(v) / mu_s)  # = var_e / (mu_s mu_e), finite where mu_e underflows
    ml_a = m - ml_s
    vl_a = v + vl_s - 2.0 * c
    mu_a = np.exp(ml_a + 0.5 * vl_a)
    var_a = np.expm1(vl_a) * mu_a * mu_a
    return mu_a.reshape(shape), var_a.reshape(shape)


def _even_exp(lp, mu, var):
    """EVEN_EXP (heads.h EvenExp; docs/maths.md 5.4): even units pass, odd ones become
    exp(Z), log-normal. The width is even, so a unit's parity is its flat index's
    (in the engine's [C][H][W] order)."""
    m, v = _flat(mu).copy(), _flat(var).copy()
    lm, lv = m[:, 1::2].copy(), v[:, 1::2].copy()  # not views: m and v are written below
    m[:, 1::2] = np.exp(lm + 0.5 * lv)
    v[:, 1::2] = np.exp(2.0 * lm + lv) * np.expm1(lv)
    shape = (mu.shape[3], mu.shape[1], mu.shape[2])
    return _maps(m, shape), _maps(v, shape)


def mean_class_probabilities(mu):
    """[n][K] class probabilities of a ONE_HOT head from its output means: clipped at
    0 and normalised to sum 1; a row without a positive finite sum is uniform
    (worker/engine/output.cc MeanClassProbabilities)."""
    mu = np.asarray(mu, dtype=np.float64)
    p = np.where(mu > 0, mu, 0.0)  # NaN too, as the engine's mu > 0 test
    total = p.sum(axis=1, keepdims=True)
    good = (total > 0) & np.isfinite(total)
    return np.where(good, p / np.where(good, total, 1.0), 1.0 / p.shape[1])


_FORWARD = {"linear": _linear, "conv2d": _conv2d, "avgPool2d": _avg_pool,
            "maxPool2d": _max_pool, "batchNorm": _batch_norm, "layerNorm": _layer_norm}
_FORWARD.update({k: _activation(k) for k in shapes.ACTIVATIONS})
_FORWARD.update({"remax": _remax, "closedFormSoftmax": _closed_form_softmax,
                 "evenExp": _even_exp})


class HsmTree:
    """The hierarchical-softmax label tree of common/hsm_tree.h."""

    def __init__(self, num_classes):
        if not 2 <= num_classes <= 1 << 16:
            raise ValueError(f"{num_classes} classes; expected 2..65536")
        self.num_classes = num_classes
        self.levels = 0
        while (1 << self.levels) < num_classes:
            self.levels += 1
        self.output_width = shapes.hsm_output_width(num_classes)
        self.nodes = np.zeros((num_classes, self.levels), dtype=np.int64)
        self.targets = np.zeros((num_classes, self.levels))
        for r in range(num_classes):
            offset = 0
            for l in range(self.levels):
                self.nodes[r, l] = offset + (r >> (self.levels - l))
                bit = (r >> (self.levels - 1 - l)) & 1
                self.targets[r, l] = 1.0 if bit == 0 else -1.0
                offset += ((num_classes - 1) >> (self.levels - l)) + 1

    def probabilities(self, mu, var):
        """[n][K] class probabilities from output units (worker/engine/output.cc)."""
        z = mu / np.sqrt(1.0 / (HSM_ALPHA * HSM_ALPHA) + var)
        node_p = 0.5 * erfc(-z / math.sqrt(2.0))
        p = node_p[:, self.nodes]  # [n][K][L]
        p = np.where(self.targets[None] > 0, p, 1.0 - p).prod(axis=2)
        total = p.sum(axis=1, keepdims=True)
        return np.where(total > 0, p / np.where(total > 0, total, 1.0), 1.0 / self.num_classes)


def _network_v1(r):
    count = r.u32("layer count")
    if not 1 <= count <= 256:
        raise ModelFileError(f"layer count {count} is out of range")
    layers = []
    for _ in range(count):
        kind, i, o, slope = r.u8("layer kind"), r.u32("in"), r.u32("out"), r.f32("slope")
        name = KIND_NAMES.get(kind)
        if name is None:
            raise ModelFileError(f"version 1 layer kind {kind} is unknown")
        spec = {}
        if name == "linear":
            spec = {"inFeatures": i, "outFeatures": o}
        elif name == "leakyRelu":
            spec = {"negativeSlope": slope}
        layers.append({name: spec})
    head, classes = r.u8("head kind"), r.u32("head classes")
    first = layers[0].get("linear", {}).get("inFeatures", 0)
    return {"input": {"channels": first, "height": 1, "width": 1}, "layers": layers,
            "head": {"classification": {"numClasses": classes}} if head == 1
            else {"regression": {}}}


def _network_v2(r):
    from google.protobuf import json_format
    from ._stubs import job_pb2
    raw = r.take(r.u32("architecture length"), "architecture")
    network = job_pb2.Network()
    try:
        network.ParseFromString(raw)
    except Exception as e:  # protobuf's DecodeError
        raise ModelFileError(f"model file holds an architecture that does not parse: {e}")
    return json_format.MessageToDict(network)


def decode_model(data, what="model file"):
    """A Model from a model file's bytes; ModelFileError saying what is wrong."""
    data = bytes(data)
    if len(data) < 8 + 4 + 8 + 4 or data[:8] != MAGIC:
        raise ModelFileError(f"{what}: not a tagi model file (bad magic or too short)")
    version, body_len = struct.unpack("<IQ", data[8:20])
    if version not in (1, 2, 3):
        raise ModelFileError(f"{what}: format version {version} is not supported (1 to 3 are)")
    if body_len != len(data) - 24:
        raise ModelFileError(f"{what}: truncated or padded: body of {body_len} bytes announced, "
                             f"{len(data) - 24} present")
    stored = struct.unpack("<I", data[-4:])[0]
    actual = zlib.crc32(data[:-4]) & 0xFFFFFFFF
    if stored != actual:
        raise ModelFileError(f"{what}: checksum mismatch (stored {stored:08x}, computed "
                             f"{actual:08x}): the file is corrupt")
    r = _Reader(data[20:-4], what)
    network = _network_v1(r) if version == 1 else _network_v2(r)
    prep = []
    for name in ("input mean", "input std", "target mean", "target std"):
        prep.append(r.floats(r.u32(name), name).astype(np.float64))
    n = r.u64("parameter count")
    mu, var = r.floats(n, "parameter means"), r.floats(n, "parameter variances")
    state = np.zeros(0, dtype=np.float32)
    if version >= 2:
        state = r.floats(r.u64("state count"), "state")
    names = []
    if version == 3:
        for _ in range(r.u32("class name count")):
            n = r.u32("class name length")
            if n == 0 or n > 255:
                raise ModelFileError(f"{what}: a class name of {n} bytes (1..255 are allowed)")
            names.append(r.take(n, "class name").decode("utf-8", errors="replace"))
    if r.at != len(r.data):
        raise ModelFileError(f"{what}: {len(r.data) - r.at} bytes after the state")
    model = Model(version, network, prep, mu, var, state, names)
    if names and len(names) != model.num_classes:
        raise ModelFileError(f"{what}: {len(names)} class names for {model.num_classes} classes")
    return model


def load_model(path):
    with open(path, "rb") as f:
        return decode_model(f.read(), str(path))
