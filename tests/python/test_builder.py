"""The model builder: pytagi's reference networks give the example job files."""
import json
import os

import pytest
from google.protobuf import json_format

from tagi_ddp import data, shapes
from tagi_ddp._stubs import job_pb2
from tagi_ddp.nn import (AvgPool2d, BatchNorm2d, ClosedFormSoftmax, Conv2d, EvenExp, LayerBlock,
                         LayerNorm, LeakyReLU, Linear, MaxPool2d, MixtureReLU, ReLU, Remax,
                         ResNetBlock, Sequential, Sigmoid, Softmax, Softplus, Tanh,
                         UnsupportedError, LSTM)


def example(src, name):
    with open(os.path.join(src, "examples", name), encoding="utf-8") as f:
        return json_format.Parse(f.read(), job_pb2.JobSpec())


def mnist_cnn():
    # TAGI_Tutorial_04_MNIST_CNN (docs/maths.md section 15), as pytagi writes it.
    return Sequential(
        Conv2d(1, 32, 4, padding=1, in_width=28, in_height=28, bias=False),
        ReLU(), BatchNorm2d(32), AvgPool2d(3, 2),
        Conv2d(32, 64, 5, bias=False), ReLU(), BatchNorm2d(64), AvgPool2d(3, 2),
        Linear(64 * 4 * 4, 256), ReLU(), Linear(256, 11))


def resnet_block(in_c, out_c, stride=1, padding_type=1, gain_weight=1):
    # pytagi's examples/tagi_resnet_model.py make_layer_block (argument order as there).
    return LayerBlock(
        Conv2d(in_c, out_c, 3, bias=False, stride=stride, padding=1, padding_type=padding_type,
               gain_weight=gain_weight),
        MixtureReLU(), BatchNorm2d(out_c),
        Conv2d(out_c, out_c, 3, bias=False, padding=1, gain_weight=gain_weight),
        MixtureReLU(), BatchNorm2d(out_c))


def down(in_c, out_c, g):
    return ResNetBlock(
        resnet_block(in_c, out_c, 2, 2, gain_weight=g),
        LayerBlock(Conv2d(in_c, out_c, 2, bias=False, stride=2, gain_weight=g), MixtureReLU(),
                   BatchNorm2d(out_c)))


def resnet18_cifar10(g, gb):
    return Sequential(
        Conv2d(3, 64, 3, bias=False, padding=1, in_width=32, in_height=32, gain_weight=g),
        MixtureReLU(), BatchNorm2d(64),
        ResNetBlock(resnet_block(64, 64, gain_weight=g)),
        ResNetBlock(resnet_block(64, 64, gain_weight=g)),
        down(64, 128, g), ResNetBlock(resnet_block(128, 128, gain_weight=g)),
        down(128, 256, g), ResNetBlock(resnet_block(256, 256, gain_weight=g)),
        down(256, 512, g), ResNetBlock(resnet_block(512, 512, gain_weight=g)),
        AvgPool2d(4), Linear(512, 11, gain_weight=g, gain_bias=gb))


def diff(a, b):
    return (json.dumps(json_format.MessageToDict(a), indent=1) + "\n---\n" +
            json.dumps(json_format.MessageToDict(b), indent=1))


def test_mnist_cnn_gives_examples_fmnist_cnn(src):
    spec = mnist_cnn().to_job_spec(
        name="fmnist-cnn", data=data.fashion_mnist(), num_classes=10, sigma_v=0.2,
        batch_size=128, epochs=3, seed=1, reduction="SUM", world_size=1, snapshot_interval=100,
        device="cpu")
    want = example(src, "fmnist_cnn.json")
    assert spec == want, diff(spec, want)


def test_mnist_cnn_with_remax_gives_examples_fmnist_cnn_remax(src):
    # The same CNN with one output per class and Remax: a one-hot head.
    layers = mnist_cnn().layers[:-1] + [Linear(256, 10), Remax()]
    spec = Sequential(*layers).to_job_spec(
        name="fmnist-cnn-remax", data=data.fashion_mnist(), num_classes=10, sigma_v=0.05,
        batch_size=128, epochs=3, seed=1, reduction="SUM", world_size=1, snapshot_interval=100,
        device="cpu")
    want = example(src, "fmnist_cnn_remax.json")
    assert spec == want, diff(spec, want)


def test_heteroscedastic_mlp_gives_examples_heteroscedastic(src):
    # pytagi's examples/regression_heteros.py network (docs/maths.md section 5.4), no sigma_v.
    net = Sequential(Linear(1, 128), ReLU(), Linear(128, 128), ReLU(), Linear(128, 2),
                     EvenExp())
    spec = net.to_job_spec(
        name="heteroscedastic",
        data=data.csv("build/heteroscedastic/train.csv", "build/heteroscedastic/test.csv",
                      has_header=True),
        batch_size=10, epochs=50, seed=1, device="cpu")
    want = example(src, "heteroscedastic.json")
    # The builder always writes the input shape and the initialisation; the
    # example leaves them to their defaults (the first Linear's width, He).
    assert spec.input == job_pb2.InputShape(channels=1, height=1, width=1)
    assert spec.init == job_pb2.Init(method=job_pb2.Init.HE)
    for field in ("input", "init"):
        if not want.HasField(field):
            spec.ClearField(field)
    assert spec == want, diff(spec, want)


def test_resnet18_gives_examples_cifar10_resnet18(src):
    # 0.083 as the job file writes it: the float32 the engine reads.
    net = resnet18_cifar10(0.083, 0.083)
    spec = net.to_job_spec(
        name="cifar10-resnet18",
        data=data.cifar10("/path/to/cifar-10-batches-bin", random_crop_padding=4,
                          horizontal_flip=True),
        num_classes=10, sigma_v=0.05, batch_size=64, epochs=20, seed=1, reduction="SUM",
        world_size=2, snapshot_interval=200, device="cpu")
    want = example(src, "cifar10_resnet18.json")
    assert spec == want, diff(spec, want)
    assert len(spec.layers) == 13  # stem 3, blocks 8, pool and Linear


def test_mlp_with_every_activation_takes_the_fields_of_the_job_format():
    net = Sequential(Linear(4, 8), ReLU(), Linear(8, 8), Sigmoid(), Linear(8, 8), Tanh(),
                     Linear(8, 8), Softplus(), Linear(8, 8), MixtureReLU(), Linear(8, 8),
                     LeakyReLU(), Linear(8, 8), LeakyReLU(negative_slope=0.2),
                     LayerNorm([8]), BatchNorm2d(8, momentum=0.5), Linear(8, 1))
    job = net.to_job_dict(name="mlp", data=data.toy_cubic(), sigma_v=0.1, batch_size=4,
                          epochs=1)
    kinds = [next(iter(l)) for l in job["layers"]]
    assert kinds == ["linear", "relu", "linear", "sigmoid", "linear", "tanh", "linear",
                     "softplus", "linear", "mixtureRelu", "linear", "leakyRelu", "linear",
                     "leakyRelu", "layerNorm", "batchNorm", "linear"]
    assert job["layers"][11] == {"leakyRelu": {}}
    assert job["layers"][13] == {"leakyRelu": {"negativeSlope": 0.2}}
    assert job["layers"][14] == {"layerNorm": {"eps": 1e-4}}  # pytagi's Python default
    assert job["layers"][15] == {"batchNorm": {"momentum": 0.5}}
    assert job["head"] == {"regression": {}}
    assert job["input"] == {"channels": 4, "height": 1, "width": 1}  # the first Linear's
    json_format.ParseDict(job, job_pb2.JobSpec())  # a valid JobSpec message


def test_pools_map_pytagi_strides_and_padding_types():
    net = Sequential(Conv2d(1, 2, 3, padding=1, padding_type=2, in_width=8),
                     MaxPool2d(2), AvgPool2d(2, 2), MaxPool2d(3, 2, 1, 1))
    layers = net.to_job_dict(name="p", data={}, sigma_v=1, batch_size=1, epochs=1)["layers"]
    assert layers[0]["conv2d"]["paddingType"] == "BOTTOM_RIGHT"
    assert layers[1] == {"maxPool2d": {"kernelSize": 2, "stride": 1}}  # pytagi's default 1
    assert layers[2] == {"avgPool2d": {"kernelSize": 2, "stride": 2}}
    assert layers[3] == {"maxPool2d": {"kernelSize": 3, "stride": 2, "padding": 1,
                                       "paddingType": "SYMMETRIC"}}


def test_batch_norm_whose_size_cannot_be_checked_here_keeps_it_for_the_server():
    # Wrong num_features: written, so the coordinator's validation names it.
    net = Sequential(Conv2d(1, 4, 3, in_width=8), BatchNorm2d(5))
    layers = net.to_job_dict(name="b", data={}, sigma_v=1, batch_size=2, epochs=1)["layers"]
    assert layers[1] == {"batchNorm": {"numFeatures": 5}}


@pytest.mark.parametrize("make, words", [
    (lambda: Softmax(), "Softmax is a pytagi layer that the tagi-ddp engine does not run"),
    (lambda: LSTM(1, 2, 3), "LSTM is a pytagi layer"),
    (lambda: Linear(3, 4, bias=False), "Linear always has a bias"),
    (lambda: BatchNorm2d(4, gain_weight=0.5), "no gain"),
    (lambda: Conv2d(1, 2, 3, init_method="Uniform"), "'He' or 'Xavier'"),
    (lambda: AvgPool2d(3, 1, 1), "padding needs padding_type 1"),
])
def test_unsupported_layers_and_arguments_are_refused(make, words):
    with pytest.raises(UnsupportedError, match=words):
        make()


def test_layers_with_different_initialisation_are_refused():
    net = Sequential(Linear(2, 3, gain_weight=0.5), ReLU(), Linear(3, 1))
    with pytest.raises(UnsupportedError, match=r"different gain_weight values \[0.5, 1.0\]"):
        net.to_job_dict(name="x", data={}, sigma_v=1, batch_size=1, epochs=1)


def test_layer_norm_shape_that_does_not_fit_is_refused():
    net = Sequential(Conv2d(1, 2, 3, in_width=6), LayerNorm([2, 5, 5]))
    with pytest.raises(ValueError, match=r"its input has shape \[2, 4, 4\]"):
        net.to_job_dict(name="x", data={}, sigma_v=1, batch_size=1, epochs=1)


@pytest.mark.parametrize("make", [lambda: Linear(0, 3), lambda: Conv2d(1, 2, -1),
                                  lambda: Linear(2.5, 3), lambda: MaxPool2d(0)])
def test_bad_sizes_are_refused_at_construction(make):
    with pytest.raises(ValueError, match="expected an integer"):
        make()


def test_elastic_bounds_go_into_the_job_and_exclude_a_fixed_world():
    net = Sequential(Linear(1, 8), ReLU(), Linear(8, 1))
    job = net.to_job_dict(name="elastic", data=data.toy_cubic(), sigma_v=0.1, batch_size=4,
                          epochs=1, min_world_size=1, max_world_size=3)
    assert job["minWorldSize"] == 1 and job["maxWorldSize"] == 3 and "worldSize" not in job
    spec = json_format.ParseDict(job, job_pb2.JobSpec())
    assert (spec.min_world_size, spec.max_world_size) == (1, 3)
    with pytest.raises(ValueError, match="exclude each other"):
        net.to_job_dict(name="x", data=data.toy_cubic(), sigma_v=0.1, batch_size=4, epochs=1,
                        world_size=2, max_world_size=3)


@pytest.mark.parametrize("last, field, proto_field", [
    (Remax, "remax", "remax"), (ClosedFormSoftmax, "closedFormSoftmax", "closed_form_softmax")])
def test_remax_and_closed_form_softmax_give_a_one_hot_head(last, field, proto_field):
    net = Sequential(Linear(784, 32), ReLU(), Linear(32, 10), last())
    job = net.to_job_dict(name="one-hot", data=data.fashion_mnist(), num_classes=10,
                          sigma_v=0.05, batch_size=16, epochs=1)
    assert job["layers"][-1] == {field: {}}
    assert job["head"] == {"classification": {"numClasses": 10, "output": "ONE_HOT"}}
    assert job["noise"] == {"sigmaV": 0.05}
    spec = json_format.ParseDict(job, job_pb2.JobSpec())
    assert spec.head.classification.output == job_pb2.Head.ONE_HOT
    assert spec.layers[-1].WhichOneof("layer") == proto_field
    # Without an output activation the head stays hierarchical softmax.
    hsm = Sequential(Linear(784, 32), ReLU(), Linear(32, 11)).to_job_dict(
        name="hsm", data=data.fashion_mnist(), num_classes=10, sigma_v=1, batch_size=16,
        epochs=1)
    assert hsm["head"] == {"classification": {"numClasses": 10}}


def test_even_exp_gives_a_heteroscedastic_head_that_may_omit_the_noise():
    net = Sequential(Linear(1, 32), ReLU(), Linear(32, 2), EvenExp())
    job = net.to_job_dict(name="heteros", data=data.toy_cubic(), batch_size=10, epochs=1)
    assert job["layers"][-1] == {"evenExp": {}}
    assert job["head"] == {"regression": {"heteroscedastic": True}}
    assert "noise" not in job
    spec = json_format.ParseDict(job, job_pb2.JobSpec())
    assert spec.head.regression.heteroscedastic and not spec.HasField("noise")
    assert spec.layers[-1].WhichOneof("layer") == "even_exp"
    given = net.to_job_dict(name="heteros", data=data.toy_cubic(), sigma_v=0.5, batch_size=10,
                            epochs=1)
    assert given["noise"] == {"sigmaV": 0.5}
    # Two targets: four outputs, pairs per target.
    two = Sequential(Linear(3, 8), ReLU(), Linear(8, 4), EvenExp()).to_job_dict(
        name="two", data=data.csv("a.csv", "b.csv", target_columns=2), batch_size=4, epochs=1)
    assert two["head"] == {"regression": {"heteroscedastic": True}}


@pytest.mark.parametrize("net, kwargs, words", [
    (Sequential(Linear(1, 4), EvenExp(), Linear(4, 2), EvenExp()), {},
     r"layers\[1\]: EvenExp is an output activation; it may only be the network's last"),
    (Sequential(Linear(4, 4), ResNetBlock(LayerBlock(Linear(4, 4), Remax())), Linear(4, 10),
                Remax()), dict(num_classes=10, sigma_v=0.1),
     r"layers\[1\]: Remax is an output activation"),
    (Sequential(Linear(4, 11), Remax()), dict(num_classes=10, sigma_v=0.1),
     r"layers\[1\] \(Remax\): one-hot classification over 10 classes needs 10 outputs.*"
     r"gives 11"),
    (Sequential(Linear(4, 8), ReLU(), Linear(8, 4), ClosedFormSoftmax()),
     dict(num_classes=10, sigma_v=0.1), r"needs 10 outputs.*gives 4"),
    (Sequential(Linear(4, 10), Remax()), dict(sigma_v=0.1), r"pass num_classes"),
    (Sequential(Linear(4, 2), EvenExp()), dict(num_classes=2, sigma_v=0.1),
     r"EvenExp is the heteroscedastic regression head's output"),
    (Sequential(Linear(4, 2), ReLU(), EvenExp()), {}, r"must follow a layer with parameters"),
    (Sequential(Linear(4, 3), EvenExp()), {}, r"\(EvenExp\): EvenExp takes \[mean, log-noise\] "
     r"pairs.*gives 3, an odd number"),
    (Sequential(Linear(4, 1)), {}, r"sigma_v: None; only a heteroscedastic"),
    (Sequential(Linear(4, 2), EvenExp()), dict(sigma_v_decay=0.9), r"sigma_v_decay"),
])
def test_output_activations_that_do_not_fit_their_head_are_refused(net, kwargs, words):
    job = dict(name="x", data=data.toy_cubic(), batch_size=4, epochs=1)
    job.update(kwargs)
    with pytest.raises(ValueError, match=words):
        net.to_job_dict(**job)


def test_shapes_refuse_even_exp_of_an_odd_width_naming_the_path():
    assert shapes.infer_layer({"remax": {}}, (10, 1, 1)) == (10, 1, 1)
    assert shapes.infer_layer({"closedFormSoftmax": {}}, (3, 1, 1)) == (3, 1, 1)
    assert shapes.infer_layer({"evenExp": {}}, (4, 1, 1)) == (4, 1, 1)
    with pytest.raises(shapes.ShapeError, match=r"^layers\[5\]: evenExp .* 3 units, an odd"):
        shapes.infer_layer({"evenExp": {}}, (3, 1, 1), "layers[5]")
    with pytest.raises(shapes.ShapeError, match=r"layers\[1\]: evenExp"):
        shapes.infer_sequence([{"linear": {"inFeatures": 2, "outFeatures": 5}}, {"evenExp": {}}],
                              (2, 1, 1))
