#!/usr/bin/env python3
"""Fits the polynomial behind GaussTail in worker/engine/elementwise.h.

For x >= 0 let phi be the standard normal density, Q(x) = P(z > x) its
upper tail and M = Q / phi the Mills ratio. The engine fits one function,

    B(x) = (1 + x^2) M(x) - x,

positive, 1.2533 at 0 and about 2 / x^3 far out, and derives the rest from
it without a difference of nearly equal numbers (x B stays below 0.32):

    M = (B + x) / (1 + x^2),   1 - x M = (1 - x B) / (1 + x^2).

B is evaluated as t^3 P(t), t = 1 / (1 + x / 4) (x / 4 is exact in float),
P of degree DEGREE, on [0, X_MAX]; past X_MAX the engine takes the tails as
0. This script fits P by iteratively reweighted least squares on the
relative error against a 40-digit reference (mpmath), rounds the
coefficients to float32, evaluates them in float32 as the engine does and
prints them with the largest relative error. Run with Debian's python3
(python3-numpy, python3-mpmath):

    /usr/bin/python3 tools/fit_gauss_tail.py
"""
import mpmath
import numpy as np

C = 0.25
POWER = 3
DEGREE = 8
X_MAX = 8.0
POINTS = 3000

mpmath.mp.dps = 40


def b_of(x):
    x = mpmath.mpf(x)
    tail = mpmath.erfc(x / mpmath.sqrt(2)) / 2
    density = mpmath.exp(-x * x / 2) / mpmath.sqrt(2 * mpmath.pi)
    return float((1 + x * x) * tail / density - x)


def fit():
    t_min = 1.0 / (1.0 + C * X_MAX)
    k = np.arange(POINTS)
    # Chebyshev points in t: dense at both ends of [t_min, 1].
    t = (t_min + 1) / 2 + (1 - t_min) / 2 * np.cos(np.pi * (k + 0.5) / POINTS)
    b = np.array([b_of((1 / ti - 1) / C) for ti in t])
    a = np.vstack([t ** (j + POWER) / b for j in range(DEGREE + 1)]).T
    weight = np.ones_like(b)
    for _ in range(40):
        coef, *_ = np.linalg.lstsq(a * weight[:, None], weight, rcond=None)
        err = np.abs(a @ coef - 1)
        weight = weight * (err / err.max()) ** 0.3 + 1e-12
        weight /= weight.max()
    return coef.astype(np.float32)


def evaluate(coef, x):
    x = np.float32(x)
    t = np.float32(1) / (np.float32(1) + np.float32(C) * x)
    p = coef[-1]
    for c in coef[-2::-1]:
        p = p * t + c
    for _ in range(POWER):
        p = p * t
    return p


def main():
    coef = fit()
    xs = np.linspace(0, X_MAX, 2001).astype(np.float32)
    worst = max(abs(float(evaluate(coef, x)) / b_of(float(x)) - 1) for x in xs)
    print(f"// t = 1 / (1 + {C}f x), B(x) = t^{POWER} P(t), P's coefficients from t^0 up;")
    print(f"// largest relative error in float on [0, {X_MAX}]: {worst:.2e}")
    for c in coef:
        print(f"{float(c):.9e}f,")


if __name__ == "__main__":
    main()
