"""DataSpec dicts (the job files' "data" field) for Sequential.to_job_dict,
and from_numpy, which writes arrays as a data set the workers read.

Paths are read by the workers, on their hosts, under their --data-root.

    path = data.from_numpy(x, y, "/var/lib/tagi/data/mine.npz")   # x [N, ...], y [N]
    job_data = data.numpy(path, holdout_fraction=0.1)
    job_data = data.image_folder("/data/pets/train", test_dir="/data/pets/test")
    job_data = data.csv("/data/iris.csv", label_column="species", has_header=True,
                        holdout_fraction=0.2)

read_idx reads an IDX file (raw or gzip) into numpy, for predictions on the
images a job trained on: read_idx(".../t10k-images-idx3-ubyte.gz") is uint8
[n][28][28].
"""
import gzip
import os

import numpy as np

_LAYOUTS = ("NCHW", "NHWC")
_FITS = {"resize": "RESIZE", "center_crop": "CENTER_CROP", "centre_crop": "CENTER_CROP"}


def _limits(spec, train_limit, test_limit, standardize):
    if train_limit:
        spec["trainLimit"] = int(train_limit)
    if test_limit:
        spec["testLimit"] = int(test_limit)
    if standardize is not None:
        spec["standardize"] = bool(standardize)
    return spec


def fashion_mnist(train_limit=0, test_limit=0, standardize=None, **paths):
    """Fashion-MNIST IDX files; no paths: Debian's dataset-fashion-mnist.

    paths: train_images, train_labels, test_images, test_labels.
    """
    return _limits(_idx("FASHION_MNIST", paths), train_limit, test_limit, standardize)


FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    """The array of an IDX file (MNIST's format; gzip when it starts with gzip's magic):
    images [n][rows][cols], labels [n]; numbers in the file's type (uint8 for MNIST)."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"{path}: not an IDX file (magic {raw[:4].hex()})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: IDX header cut short")
    dims = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    count = int(np.prod(dims)) if dims else 1
    if len(raw) - header != count * dtype.itemsize:
        raise ValueError(f"{path}: IDX holds {len(raw) - header} bytes of data; its dimensions "
                         f"{list(dims)} need {count * dtype.itemsize}")
    return np.frombuffer(raw, dtype, count, header).reshape(dims).astype(dtype.newbyteorder("="))


def mnist(train_images, train_labels, test_images, test_labels, train_limit=0, test_limit=0,
          standardize=None):
    """MNIST-format IDX files (raw or gzip), 10 classes; images [n][rows][cols]."""
    paths = dict(train_images=train_images, train_labels=train_labels,
                 test_images=test_images, test_labels=test_labels)
    return _limits(_idx("MNIST", paths), train_limit, test_limit, standardize)


def _idx(kind, paths):
    names = {"train_images": "trainImages", "train_labels": "trainLabels",
             "test_images": "testImages", "test_labels": "testLabels"}
    unknown = set(paths) - set(names)
    if unknown:
        raise TypeError(f"unknown IDX path arguments {sorted(unknown)}; expected {sorted(names)}")
    spec = {"kind": kind}
    spec.update({names[k]: str(v) for k, v in paths.items()})
    return spec


def csv(train_csv, test_csv=None, target_columns=1, has_header=False, train_limit=0,
        test_limit=0, standardize=None, label_column=None, holdout_fraction=0.0):
    """CSV files. Without label_column: regression, numeric columns, the last
    target_columns are targets (test_csv required). With label_column (a header
    name, or an int: the 0-based index): classification (CSV_CLASSIFICATION),
    integer labels 0..K-1 in that column, the other columns numeric features;
    without test_csv, holdout_fraction of the training rows is the test set."""
    if label_column is None:
        if test_csv is None:
            raise TypeError("regression CSV needs test_csv (or give label_column for "
                            "classification)")
        spec = {"kind": "CSV", "trainCsv": str(train_csv), "testCsv": str(test_csv)}
        if target_columns != 1:
            spec["targetColumns"] = int(target_columns)
    else:
        spec = {"kind": "CSV_CLASSIFICATION", "trainCsv": str(train_csv)}
        if test_csv is not None:
            spec["testCsv"] = str(test_csv)
        if isinstance(label_column, (int, np.integer)) and not isinstance(label_column, bool):
            spec["labelColumnIndex"] = int(label_column)
        else:
            spec["labelColumn"] = str(label_column)
        _holdout(spec, holdout_fraction)
    if has_header:
        spec["csvHasHeader"] = True
    return _limits(spec, train_limit, test_limit, standardize)


def _holdout(spec, fraction):
    if fraction:
        fraction = float(fraction)
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"holdout_fraction {fraction} is not in (0, 1)")
        spec["holdoutFraction"] = fraction
    return spec


def _augment(spec, random_crop_padding, horizontal_flip):
    augment = {}
    if random_crop_padding:
        augment["randomCropPadding"] = int(random_crop_padding)
    if horizontal_flip:
        augment["horizontalFlip"] = True
    if augment:
        spec["augment"] = augment
    return spec


def from_numpy(x, y, path, x_test=None, y_test=None, compress=False):
    """Writes x [N, ...] (float32, float64 or uint8; other numbers become
    float32) and y [N] integer labels or [N] / [N, k] float targets, and
    optionally a test pair, as one .npz at `path` (numpy.savez, or
    savez_compressed when `compress`). Returns the path, ready for
    numpy(path). The file must lie under the workers' --data-root."""
    arrays = {}
    for name, a, b in (("train", x, y), ("test", x_test, y_test)):
        if a is None and b is None:
            continue
        if a is None or b is None:
            raise ValueError(f"x_{name} and y_{name}: give both or neither")
        a, b = np.asarray(a), np.asarray(b)
        if a.ndim < 1 or len(a) == 0:
            raise ValueError(f"x_{name}: expected [N, ...] samples with N >= 1, got {a.shape}")
        if b.ndim not in (1, 2) or len(b) != len(a):
            raise ValueError(f"y_{name}: expected [N] or [N, k] with N = {len(a)}, got {b.shape}")
        if a.dtype not in (np.float32, np.float64, np.uint8):
            a = a.astype(np.float32)
        if np.issubdtype(b.dtype, np.integer) or b.dtype == np.bool_:
            b = b.astype(np.int64)
        elif b.dtype not in (np.float32, np.float64):
            b = b.astype(np.float32)
        for what, arr in (("x", a), ("y", b)):
            if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                raise ValueError(f"{what}_{name}: holds non-finite values")
        arrays[f"x_{name}"] = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<")))
        arrays[f"y_{name}"] = np.ascontiguousarray(b.astype(b.dtype.newbyteorder("<")))
    if "x_train" not in arrays:
        raise ValueError("x and y are required")
    path = os.fspath(path)
    if not path.endswith(".npz"):
        raise ValueError(f"{path}: the file name must end in .npz")
    with open(path, "wb") as f:
        (np.savez_compressed if compress else np.savez)(f, **arrays)
    return path


def numpy(npz=None, train_x=None, train_y=None, test_x=None, test_y=None, layout="NCHW",
          holdout_fraction=0.0, train_limit=0, test_limit=0, standardize=None,
          random_crop_padding=0, horizontal_flip=False):
    """NUMPY data: one .npz (x_train, y_train[, x_test, y_test], e.g. from
    from_numpy) or .npy paths. 4-d inputs are [N, C, H, W] (layout "NCHW") or
    [N, H, W, C] ("NHWC"). Without a test set, holdout_fraction of the
    training samples (drawn from the job's seed) is the test set."""
    if layout not in _LAYOUTS:
        raise ValueError(f"layout {layout!r}; expected one of {_LAYOUTS}")
    spec = {"kind": "NUMPY"}
    if npz is not None:
        if any(p is not None for p in (train_x, train_y, test_x, test_y)):
            raise TypeError("give npz or the .npy paths, not both")
        spec["npz"] = os.fspath(npz)
    else:
        if train_x is None or train_y is None:
            raise TypeError("give npz, or train_x and train_y (.npy paths)")
        spec["trainXNpy"], spec["trainYNpy"] = os.fspath(train_x), os.fspath(train_y)
        if (test_x is None) != (test_y is None):
            raise TypeError("test_x and test_y: give both or neither")
        if test_x is not None:
            spec["testXNpy"], spec["testYNpy"] = os.fspath(test_x), os.fspath(test_y)
    if layout != "NCHW":
        spec["layout"] = layout
    _holdout(spec, holdout_fraction)
    _augment(spec, random_crop_padding, horizontal_flip)
    return _limits(spec, train_limit, test_limit, standardize)


def image_folder(train_dir, test_dir=None, fit="resize", holdout_fraction=0.0, train_limit=0,
                 test_limit=0, standardize=None, random_crop_padding=0, horizontal_flip=False):
    """IMAGE_FOLDER data: one sub-folder per class of PNG / JPEG files (class
    names sorted give labels 0..K-1; the model file stores them). Images are
    fitted to the job's input shape (give the model an input of 1 or 3
    channels): fit "resize" stretches them, "center_crop" scales the short
    side and crops the centre."""
    if fit not in _FITS:
        raise ValueError(f"fit {fit!r}; expected one of {sorted(_FITS)}")
    spec = {"kind": "IMAGE_FOLDER", "trainDir": os.fspath(train_dir)}
    if test_dir is not None:
        spec["testDir"] = os.fspath(test_dir)
    if _FITS[fit] != "RESIZE":
        spec["imageFit"] = _FITS[fit]
    _holdout(spec, holdout_fraction)
    _augment(spec, random_crop_padding, horizontal_flip)
    return _limits(spec, train_limit, test_limit, standardize)


def toy_cubic(train_size=None, test_size=None):
    """y = x^3 + noise, generated from the job seed (the TAGI paper's toy)."""
    spec = {"kind": "TOY_CUBIC"}
    if train_size is not None:
        spec["toyTrainSize"] = int(train_size)
    if test_size is not None:
        spec["toyTestSize"] = int(test_size)
    return spec


def cifar10(directory, random_crop_padding=0, horizontal_flip=False, train_limit=0,
            test_limit=0):
    """CIFAR-10's binary version: data_batch_1..5.bin and test_batch.bin in `directory`."""
    spec = {"kind": "CIFAR10", "cifar10Dir": str(directory)}
    _augment(spec, random_crop_padding, horizontal_flip)
    return _limits(spec, train_limit, test_limit, None)
