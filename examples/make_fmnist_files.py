#!/usr/bin/env python3
"""Writes Debian's Fashion-MNIST (dataset-fashion-mnist) in the formats a user
brings, for examples/fmnist_folder.json and examples/fmnist_npz.json:

    examples/make_fmnist_files.py /var/lib/tagi/data            # all 70,000 images
    examples/make_fmnist_files.py DIR --limit 1000              # the first 1000 + 1000/6

DIR/fmnist-png/{train,test}/<class name>/<index>.png   8-bit grey PNGs (IMAGE_FOLDER)
DIR/fmnist.npz                                         x_train [N,28,28] uint8, y_train, x_test,
                                                       y_test (NUMPY, via tagi_ddp.data)
DIR/fmnist-npy/{x,y}_{train,test}.npy                  the same arrays as .npy files

numpy only: the PNGs are written with zlib and struct.
"""
import argparse
import gzip
import os
import struct
import sys
import zlib

import numpy as np

FMNIST = "/usr/share/datasets/fashion-mnist"
CLASSES = ["0-tshirt", "1-trouser", "2-pullover", "3-dress", "4-coat", "5-sandal", "6-shirt",
           "7-sneaker", "8-bag", "9-boot"]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndims = raw[3]
    dims = struct.unpack(f">{ndims}I", raw[4:4 + 4 * ndims])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndims).reshape(dims)


def png(pixels):
    """An 8-bit greyscale PNG of a 2-d uint8 array."""
    h, w = pixels.shape
    raw = b"".join(b"\x00" + row.tobytes() for row in pixels)

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def load(limit=0):
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = read_idx(os.path.join(FMNIST, f"{prefix}-images-idx3-ubyte.gz"))
        y = read_idx(os.path.join(FMNIST, f"{prefix}-labels-idx1-ubyte.gz")).astype(np.int64)
        n = len(x) if not limit else min(len(x), limit if split == "train" else max(limit // 6, 1))
        out[split] = (x[:n], y[:n])
    return out


def write_folder(root, arrays):
    for split, (x, y) in arrays.items():
        for name in CLASSES:
            os.makedirs(os.path.join(root, split, name), exist_ok=True)
        for i, (image, label) in enumerate(zip(x, y)):
            with open(os.path.join(root, split, CLASSES[label], f"{i:05d}.png"), "wb") as f:
                f.write(png(image))


def write_npy(root, arrays):
    os.makedirs(root, exist_ok=True)
    for split, (x, y) in arrays.items():
        np.save(os.path.join(root, f"x_{split}.npy"), x)
        np.save(os.path.join(root, f"y_{split}.npy"), y)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("dir")
    p.add_argument("--limit", type=int, default=0, help="training images (0: all 60,000)")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from tagi_ddp import data
    arrays = load(args.limit)
    os.makedirs(args.dir, exist_ok=True)
    write_folder(os.path.join(args.dir, "fmnist-png"), arrays)
    write_npy(os.path.join(args.dir, "fmnist-npy"), arrays)
    (x, y), (xt, yt) = arrays["train"], arrays["test"]
    data.from_numpy(x, y, os.path.join(args.dir, "fmnist.npz"), x_test=xt, y_test=yt)
    print(f"{args.dir}: fmnist-png/, fmnist-npy/, fmnist.npz ({len(x)} training, {len(xt)} test "
          "images)")


if __name__ == "__main__":
    main(sys.argv[1:])
