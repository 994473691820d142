#!/usr/bin/env python3
"""Writes the data set of examples/heteroscedastic.json: one input, one target
whose noise grows with the input, as train.csv and test.csv in DIR.

    x ~ U[-1, 1],  y = sin(3 x) + (0.05 + 0.25 (x + 1)^2) * N(0, 1)

so the noise's standard deviation runs from 0.05 at x = -1 to 1.05 at x = 1:
a homoscedastic head must pick one sigma_v for both ends; a heteroscedastic
head learns it per input. Usage: heteroscedastic_data.py DIR [--train N]
[--test N] [--seed S].
"""
import argparse
import math
import os
import random


def noise_sd(x):
    return 0.05 + 0.25 * (x + 1.0) ** 2


def sample(rng, n):
    x = [rng.uniform(-1.0, 1.0) for _ in range(n)]
    y = [math.sin(3.0 * v) + noise_sd(v) * rng.gauss(0.0, 1.0) for v in x]
    return x, y


def write(path, x, y):
    with open(path, "w") as f:
        f.write("x,y\n")
        for a, b in zip(x, y):
            f.write(f"{a:.7g},{b:.7g}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--train", type=int, default=1000)
    p.add_argument("--test", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.train < 1 or a.test < 1:
        p.error("--train and --test must be at least 1")
    os.makedirs(a.dir, exist_ok=True)
    rng = random.Random(a.seed)
    write(os.path.join(a.dir, "train.csv"), *sample(rng, a.train))
    write(os.path.join(a.dir, "test.csv"), *sample(rng, a.test))


if __name__ == "__main__":
    main()
