"""Runs pytagi 0.2.1 for test_pytagi.py, in a process of its own (its library path).

  pytagi_run.py load SAVE X.npy OUT.npz   # Sequential.load(SAVE), forward X
  pytagi_run.py make SAVE X.npy OUT.npz   # a fresh network, Sequential.save(SAVE), forward X
The network is the tests' 784-32-ReLU-11 MLP. OUT holds mu and var [n][11].
"""
import sys

import numpy as np
from pytagi.nn import Linear, ReLU, Sequential


def main():
    mode, save, x_path, out = sys.argv[1:5]
    net = Sequential(Linear(784, 32), ReLU(), Linear(32, 11))
    net.preinit_layer()
    if mode == "load":
        net.load(save)
    else:
        net.save(save)
    net.eval()
    x = np.load(x_path).astype(np.float32)
    mu, var = net(x.reshape(-1))
    np.savez(out, mu=np.asarray(mu).reshape(len(x), -1), var=np.asarray(var).reshape(len(x), -1))


if __name__ == "__main__":
    main()
