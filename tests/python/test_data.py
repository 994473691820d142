"""Bring your own data from Python: numpy arrays, image folders and labelled
CSV, to trained models.

from_numpy writes arrays that a coordinator with 2 workers trains on (the
model downloaded and scored in numpy); an image folder of PNGs written here
(zlib + struct, no imaging library) trains with tagi-train and its model file
names the classes; two workers holding different copies of the same data
file fail their job at the start, naming both data fingerprints. read_idx
reads IDX files, raw or gzip, and refuses what is not one.
"""
import gzip
import json
import os
import struct
import subprocess
import zlib

import numpy as np
import pytest

from cluster import Cluster, write_idx
from tagi_ddp import Client, data, load_model
from tagi_ddp.nn import Linear, ReLU, Sequential, hsm_output_width

SIDE = 10


def bands(n, classes, seed):
    """[n][SIDE][SIDE] uint8 images whose class c is a bright row c, with noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.integers(0, 60, (n, SIDE, SIDE)).astype(np.uint8)
    x[np.arange(n), y, :] = 220
    return x, y


def png(pixels):
    """An 8-bit greyscale PNG of a 2-d uint8 array."""
    h, w = pixels.shape
    raw = b"".join(b"\x00" + bytes(row) for row in pixels.astype(np.uint8))

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def mlp(classes):
    return Sequential(Linear(SIDE * SIDE, 32), ReLU(), Linear(32, hsm_output_width(classes)))


def job(name, spec, classes, world_size=None, epochs=3, input_shape=None):
    return mlp(classes).to_job_dict(
        name=name, data=spec, num_classes=classes, sigma_v=1.0, batch_size=16, epochs=epochs,
        seed=5, reduction="SUM", world_size=world_size, device="cpu", input_shape=input_shape)


def tagi_train(bindir, job_dict, tmp, out):
    path = os.path.join(tmp, job_dict["name"] + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(job_dict, f)
    r = subprocess.run([os.path.join(bindir, "tagi-train"), path, "--out", out, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_builders_make_the_job_data_field(tmp_path):
    x, y = bands(8, 3, 1)
    path = data.from_numpy(x, y, tmp_path / "b.npz", x_test=x, y_test=y, compress=True)
    with np.load(path) as z:
        assert sorted(z.files) == ["x_test", "x_train", "y_test", "y_train"]
        assert z["x_train"].dtype == np.uint8 and z["y_train"].dtype == np.int64
    assert data.numpy(path, layout="NHWC") == {"kind": "NUMPY", "npz": path, "layout": "NHWC"}
    assert data.numpy(train_x="a.npy", train_y="b.npy", holdout_fraction=0.1) == {
        "kind": "NUMPY", "trainXNpy": "a.npy", "trainYNpy": "b.npy", "holdoutFraction": 0.1}
    assert data.image_folder("d", fit="center_crop", holdout_fraction=0.2) == {
        "kind": "IMAGE_FOLDER", "trainDir": "d", "imageFit": "CENTER_CROP",
        "holdoutFraction": 0.2}
    assert data.csv("t.csv", label_column="kind", has_header=True, holdout_fraction=0.5) == {
        "kind": "CSV_CLASSIFICATION", "trainCsv": "t.csv", "labelColumn": "kind",
        "holdoutFraction": 0.5, "csvHasHeader": True}
    assert data.csv("t.csv", label_column=0, test_csv="u.csv")["labelColumnIndex"] == 0
    with pytest.raises(ValueError, match="non-finite"):
        data.from_numpy(np.array([[np.nan]]), np.array([0]), tmp_path / "n.npz")
    with pytest.raises(ValueError, match="y_train"):
        data.from_numpy(np.zeros((3, 2)), np.zeros(2), tmp_path / "m.npz")
    with pytest.raises(ValueError, match="holdout_fraction"):
        data.numpy(path, holdout_fraction=1.5)


def test_from_numpy_to_a_trained_downloaded_model(tmp_path):
    from conftest import bin_dir
    tmp = str(tmp_path)
    x, y = bands(600, 10, 2)
    path = data.from_numpy(x, y, os.path.join(tmp, "bands.npz"))
    cluster = Cluster(bin_dir(), tmp, workers=2, world=2)
    client = Client(cluster.address, timeout=10)
    try:
        submitted = client.submit(job("py-numpy", data.numpy(path, holdout_fraction=0.2), 10,
                                      world_size=2))
        final = list(client.watch(submitted.id, timeout=120, progress=False))[-1]
        assert final.state == "SUCCEEDED", cluster.logs()
        model_path = os.path.join(tmp, "numpy.tagi")
        client.download(submitted.id, model_path)
    finally:
        client.close()
        cluster.stop()
    model = load_model(model_path)
    x_new, y_new = bands(200, 10, 99)
    accuracy = float(np.mean(model.predict_classes(x_new.reshape(200, -1) / 255.0) == y_new))
    print(f"numpy data set, 2 workers: accuracy {accuracy:.3f} on fresh samples")
    assert accuracy > 0.6


def test_image_folder_model_names_its_classes(tmp_path, bindir):
    tmp = str(tmp_path)
    names = ["ant", "bee", "cat"]
    x, y = bands(150, 3, 3)
    for i, (image, label) in enumerate(zip(x, y)):
        folder = tmp_path / "images" / names[label]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:04d}.png").write_bytes(png(image))
    spec = data.image_folder(tmp_path / "images", holdout_fraction=0.2)
    out = os.path.join(tmp, "images.tagi")
    result = tagi_train(bindir, job("py-images", spec, 3, input_shape=(1, SIDE, SIDE)), tmp, out)
    assert result["test_accuracy"] > 0.6, result
    model = load_model(out)
    assert model.version == 3 and model.class_names == names
    x_new, y_new = bands(30, 3, 7)
    predicted = model.predict_names(x_new.reshape(30, -1) / 255.0)
    assert np.mean([p == names[t] for p, t in zip(predicted, y_new)]) > 0.6


def test_two_workers_with_different_copies_fail_naming_both_fingerprints(tmp_path, bindir):
    """Each worker reads the relative path d.npz from its own directory: two hosts."""
    tmp = str(tmp_path)
    dirs, fingerprints = [], []
    for i in range(2):
        d = tmp_path / f"host{i}"
        d.mkdir()
        x, y = bands(64, 10, 10 + i)  # same shape, different bytes
        path = data.from_numpy(x, y, str(d / "d.npz"))
        single = job(f"copy{i}", data.numpy(path, holdout_fraction=0.25), 10, epochs=1)
        fingerprints.append(tagi_train(bindir, single, tmp, str(d / "m.tagi"))["data_fingerprint"])
        dirs.append(str(d))
    assert fingerprints[0] != fingerprints[1]
    cluster = Cluster(bindir, tmp, workers=2, world=2, worker_dirs=dirs)
    client = Client(cluster.address, timeout=10)
    try:
        submitted = client.submit(job("two-copies", data.numpy("d.npz", holdout_fraction=0.25),
                                      10, world_size=2, epochs=1))
        final = list(client.watch(submitted.id, timeout=60, progress=False))[-1]
    finally:
        client.close()
        cluster.stop()
    assert final.state == "FAILED", final
    assert "data mismatch" in final.reason, final.reason
    assert fingerprints[0] in final.reason and fingerprints[1] in final.reason, final.reason


def test_example_jobs_on_fashion_mnist_written_as_png_and_npz(tmp_path, bindir, src):
    """examples/make_fmnist_files.py writes 600 + 100 Fashion-MNIST images as a PNG
    folder and an .npz; examples/fmnist_folder.json and fmnist_npz.json train on
    them. The .npz holds the IDX files' first images, so its job trains the very
    model (parameter checksum) and data set (fingerprint) of the IDX job."""
    if not os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
        pytest.skip("dataset-fashion-mnist is not installed")
    import sys
    tmp = str(tmp_path)
    r = subprocess.run([sys.executable, os.path.join(src, "examples", "make_fmnist_files.py"),
                        tmp, "--limit", "600"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    results = {}
    for name in ("fmnist_folder", "fmnist_npz", "idx"):
        with open(os.path.join(src, "examples",
                               "fmnist_npz.json" if name == "idx" else name + ".json"),
                  encoding="utf-8") as f:
            spec = json.loads(f.read().replace("/var/lib/tagi/data", tmp))
        if name == "idx":
            spec["data"] = {"kind": "FASHION_MNIST", "trainLimit": 600, "testLimit": 100}
        spec["name"], spec["epochs"] = name, 1
        results[name] = tagi_train(bindir, spec, tmp, os.path.join(tmp, name + ".tagi"))
    print(results)
    assert results["fmnist_folder"]["test_accuracy"] > 0.5
    assert results["fmnist_npz"]["test_accuracy"] > 0.5
    assert results["fmnist_npz"]["data_fingerprint"] == results["idx"]["data_fingerprint"]
    assert results["fmnist_npz"]["parameter_checksum"] == results["idx"]["parameter_checksum"]
    assert load_model(os.path.join(tmp, "fmnist_folder.tagi")).class_names[9] == "9-boot"


def test_read_idx_reads_raw_and_gzip_files_and_refuses_others(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "images.idx", images.shape, images.tobytes())
    got = data.read_idx(tmp_path / "images.idx")
    assert got.dtype == np.uint8 and np.array_equal(got, images)
    (tmp_path / "images.idx.gz").write_bytes(gzip.compress((tmp_path / "images.idx").read_bytes()))
    assert np.array_equal(data.read_idx(tmp_path / "images.idx.gz"), images)
    floats = np.array([1.5, -2.0, 3.25], dtype=">f4")
    raw = struct.pack(">BBBBI", 0, 0, 0x0D, 1, 3) + floats.tobytes()
    (tmp_path / "floats.idx").write_bytes(raw)
    assert data.read_idx(tmp_path / "floats.idx").tolist() == [1.5, -2.0, 3.25]
    (tmp_path / "short.idx").write_bytes(raw[:-1])
    with pytest.raises(ValueError, match="holds 11 bytes of data; its dimensions \\[3\\] need 12"):
        data.read_idx(tmp_path / "short.idx")
    (tmp_path / "png.idx").write_bytes(png(images[0]))
    with pytest.raises(ValueError, match="not an IDX file"):
        data.read_idx(tmp_path / "png.idx")
