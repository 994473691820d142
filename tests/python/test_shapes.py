"""The package's shape rules (tagi_ddp.shapes, which the builder uses) against the C++
validation (`tagictl validate --json`, the coordinator's own check) on every example job
file and on random networks: both accept the same networks, with the same output shape."""
import copy
import json
import os
import random
import subprocess
import tempfile

import pytest

from tagi_ddp import shapes

SOURCE = os.environ.get("TAGI_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TAGICTL = os.path.join(os.environ.get("TAGI_BIN_DIR", os.path.join(SOURCE, "build", "bin")),
                       "tagictl")

pytestmark = pytest.mark.skipif(not os.path.exists(TAGICTL), reason=f"{TAGICTL} is not built")


def validate(job):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
        path = f.name
    try:
        out = subprocess.run([TAGICTL, "validate", path, "--json"], capture_output=True,
                             text=True, timeout=60)
    finally:
        os.unlink(path)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def oneof_form(layer):
    """A first-format layer ({"kind": "LINEAR", "inFeatures": ...}) in the oneof form that
    tagi_ddp.shapes reads; a oneof layer as it is."""
    if "kind" not in layer:
        return layer
    kind = layer["kind"]
    if kind == "LINEAR":
        return {"linear": {"inFeatures": layer.get("inFeatures", 0),
                           "outFeatures": layer.get("outFeatures", 0)}}
    name = "".join(p.capitalize() for p in kind.lower().split("_"))
    return {name[0].lower() + name[1:]: {}}


def python_output(layers, shape):
    try:
        return list(shapes.infer_sequence(layers, shape))
    except shapes.ShapeError as e:
        return str(e)


def examples():
    d = os.path.join(SOURCE, "examples")
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".json"))


@pytest.mark.parametrize("path", examples(), ids=os.path.basename)
def test_every_example_agrees(path):
    job = json.load(open(path))
    got = validate(job)
    assert got["valid"], got
    shape = tuple(got["output"])  # C++'s answer for the whole network
    # Python infers from the input the C++ side reports in the architecture string.
    arch_input = got["architecture"].split("-")[0]
    dims = [int(x) for x in arch_input.split("x")] if "x" in arch_input else [int(arch_input), 1, 1]
    out = python_output([oneof_form(l) for l in job["layers"]], tuple(dims))
    assert out == list(shape), (path, out, shape)


def random_layers(rng, shape, depth=0):
    """A random, mostly valid, sometimes invalid layer list on input `shape`."""
    layers = []
    c, h, w = shape
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if h > 1 and roll < 0.3:
            k = rng.choice([1, 2, 3])
            out = rng.choice([1, 2, 4])
            pad = rng.choice([0, 1])
            layer = {"conv2d": {"inChannels": c if rng.random() < 0.9 else c + 1, "outChannels": out,
                                "kernelSize": k, "padding": pad}}
        elif h > 1 and roll < 0.45:
            k = rng.choice([2, 3])
            layer = {rng.choice(["avgPool2d", "maxPool2d"]): {"kernelSize": k,
                                                              "stride": rng.choice([1, 2])}}
        elif roll < 0.55:
            layer = {"batchNorm": {"numFeatures": c if rng.random() < 0.9 else c + 2}}
        elif roll < 0.7 and depth == 0:
            layer = {"residual": {"main": random_layers(rng, (c, h, w), depth + 1)}}
        elif roll < 0.85:
            size = c * h * w
            layer = {"linear": {"inFeatures": size if rng.random() < 0.9 else size + 1,
                                "outFeatures": rng.choice([3, 5, 8])}}
        else:
            layer = {rng.choice(["relu", "tanh", "sigmoid", "softplus", "mixtureRelu"]): {}}
        layers.append(layer)
        nxt = python_output([layer], (c, h, w))
        if isinstance(nxt, str):
            return layers  # invalid: stop here (the test wants both sides to refuse it)
        c, h, w = nxt
    return layers


def test_random_networks_agree():
    base = json.load(open(os.path.join(SOURCE, "examples", "fmnist_cnn.json")))
    rng = random.Random(20261127)
    agreed = {"valid": 0, "invalid": 0}
    for i in range(150):
        job = copy.deepcopy(base)
        shape = (1, 28, 28)
        layers = random_layers(rng, shape)
        py = python_output(layers, shape)
        if not isinstance(py, str):
            # The example's head (hierarchical softmax over 10 classes: 11 units) on whatever
            # comes out: the network itself is what is compared.
            size = py[0] * py[1] * py[2]
            layers.append({"linear": {"inFeatures": size, "outFeatures": 11}})
            py = [11, 1, 1]
        job["layers"] = layers
        got = validate(job)
        if isinstance(py, str):
            assert not got["valid"], (i, layers, py, got)
            agreed["invalid"] += 1
        else:
            assert got["valid"], (i, layers, got)
            assert got["output"] == py, (i, layers, got)
            agreed["valid"] += 1
    assert agreed["valid"] >= 10 and agreed["invalid"] >= 5, agreed
