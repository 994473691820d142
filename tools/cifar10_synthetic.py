#!/usr/bin/env python3
"""Write a CIFAR-10-shaped data set in the data set's binary layout.

    tools/cifar10_synthetic.py DIR [--train N] [--test N] [--seed S]

DIR gets data_batch_1.bin .. data_batch_5.bin (N/5 records each) and
test_batch.bin: records of one label byte and 3x32x32 pixel bytes, channel
by channel, as the real set has them. No real CIFAR-10 ships in a Debian
package and nothing may be downloaded, so this is what a ResNet18 run on the
GPU trains on where the real set is absent (point the job's cifar10Dir at
the real cifar-10-batches-bin where you have it).

Class k is a sinusoidal grating at about 18 k degrees (jittered, so that
neighbouring classes overlap) with a random spatial frequency, phase,
contrast and colour, under a weaker distractor grating at any angle and
strong pixel noise: the colour says nothing about the class, so a network
has to find the orientation, a spatial feature.
"""
import argparse
import os
import sys

import numpy as np

CLASSES = 10
SIDE = 32


def images(rng, n):
    labels = rng.integers(0, CLASSES, size=n)
    y, x = np.mgrid[0:SIDE, 0:SIDE].astype(np.float64)

    def grating(angle):
        freq = rng.uniform(0.08, 0.25, size=n)  # cycles per pixel
        phase = rng.uniform(0, 2 * np.pi, size=n)
        u = np.cos(angle)[:, None, None] * x + np.sin(angle)[:, None, None] * y
        return np.sin(2 * np.pi * freq[:, None, None] * u + phase[:, None, None])

    # The class's grating (its angle jittered so that neighbours overlap),
    # a weaker distractor at any angle, and strong pixel noise.
    wave = (grating(labels * (np.pi / CLASSES) + rng.normal(0, 0.06, size=n)) +
            rng.uniform(0, 0.4, size=(n, 1, 1)) * grating(rng.uniform(0, np.pi, size=n)))
    contrast = rng.uniform(30, 70, size=n)
    colour = rng.uniform(0.3, 1.0, size=(n, 3))
    base = rng.uniform(60, 190, size=(n, 3))
    pixels = (base[:, :, None, None] + contrast[:, None, None, None] * colour[:, :, None, None] *
              wave[:, None, :, :] + rng.normal(0, 30, size=(n, 3, SIDE, SIDE)))
    pixels = np.clip(np.rint(pixels), 0, 255).astype(np.uint8)
    records = np.empty((n, 1 + 3 * SIDE * SIDE), dtype=np.uint8)
    records[:, 0] = labels
    records[:, 1:] = pixels.reshape(n, -1)
    return records


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--train", type=int, default=50000)
    p.add_argument("--test", type=int, default=10000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.train < 5 or args.train % 5 or args.test < 1:
        print("cifar10_synthetic: --train must be a positive multiple of 5, --test positive",
              file=sys.stderr)
        return 2
    os.makedirs(args.dir, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    files = ["data_batch_%d.bin" % i for i in range(1, 6)]
    for name in files:
        images(rng, args.train // 5).tofile(os.path.join(args.dir, name))
    images(rng, args.test).tofile(os.path.join(args.dir, "test_batch.bin"))
    print("cifar10_synthetic: %d training and %d test images in %s" % (args.train, args.test, args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
