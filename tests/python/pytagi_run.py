"""Runs pytagi 0.2.1 for test_pytagi.py, in a process of its own (its library path).

  pytagi_run.py load NET SAVE X.npy OUT.npz   # Sequential.load(SAVE), forward X
  pytagi_run.py make NET SAVE X.npy OUT.npz   # a fresh network trained a few steps on X
                                              # (random targets: one-hot labels for a net
                                              # ending in Remax or ClosedFormSoftmax, one
                                              # target per sample through update_heteros
                                              # for EvenExp), Sequential.save(SAVE),
                                              # forward X in evaluation mode
NET names one of the networks below; X is [n][C*H*W], images flattened channel,
row, column (NCHW, pytagi's order and ours). OUT holds mu and var [n][outputs].

The networks are written once for both libraries: network(name, module) builds
one from tagi_ddp.nn (the test) or pytagi.nn (here), which share the layer names
and arguments. Pools get their stride explicitly (pytagi's AvgPool2d default -1
is a global pool; ours is the kernel).
"""
import sys

import numpy as np

BATCH = 8


def network(name, m):
    if name == "mlp":
        return m.Sequential(m.Linear(784, 32), m.ReLU(), m.Linear(32, 11))
    if name == "mlp_bn":  # BatchNorm on Linear features (the 1-D path)
        return m.Sequential(m.Linear(784, 32), m.ReLU(), m.BatchNorm2d(32), m.Linear(32, 11))
    if name == "cnn":  # every image kind: 1x28x28 -> 27 -> 13 -> 13 -> 6 -> 3
        return m.Sequential(
            m.Conv2d(1, 4, 4, padding=1, in_width=28, in_height=28), m.ReLU(), m.BatchNorm2d(4),
            m.AvgPool2d(3, 2),
            m.ResNetBlock(m.LayerBlock(m.Conv2d(4, 4, 3, padding=1), m.MixtureReLU(),
                                       m.BatchNorm2d(4), m.Conv2d(4, 4, 3, padding=1))),
            m.MaxPool2d(3, 2),
            m.ResNetBlock(
                m.LayerBlock(m.Conv2d(4, 8, 3, stride=2, padding=1, padding_type=2), m.ReLU(),
                             m.BatchNorm2d(8)),
                m.LayerBlock(m.Conv2d(4, 8, 2, stride=2, bias=False), m.BatchNorm2d(8))),
            m.LayerNorm([8, 3, 3]), m.Linear(72, 16), m.Tanh(), m.Linear(16, 11))
    # The output heads' activations (docs/heads.md), on 8 inputs.
    if name == "remax":
        return m.Sequential(m.Linear(8, 16), m.ReLU(), m.Linear(16, 10), m.Remax())
    if name == "cfsoftmax":
        return m.Sequential(m.Linear(8, 16), m.ReLU(), m.Linear(16, 10), m.ClosedFormSoftmax())
    if name == "evenexp":
        return m.Sequential(m.Linear(8, 16), m.ReLU(), m.Linear(16, 2), m.EvenExp())
    raise ValueError(f"unknown network {name!r}")


ONE_HOT_SIGMA_V = 0.1


def main():
    import pytagi.nn as m
    mode, name, save, x_path, out = sys.argv[1:6]
    x = np.load(x_path).astype(np.float32)
    if mode == "make":  # the same draw every run
        from pytagi import manual_seed
        manual_seed(11)
    net = network(name, m)
    if mode == "load":
        net.preinit_layer()
        net.load(save)
    else:
        # pytagi 0.2.1 crashes when a network that ran preinit_layer() trains, so none here.
        net.train()
        updater = m.OutputUpdater(net.device)
        rng = np.random.default_rng(3)
        for step in range(4):
            xb = x[step * BATCH:(step + 1) * BATCH]
            net(xb.reshape(-1))
            width = net.output_z_buffer.actual_size
            if name == "evenexp":
                y = rng.standard_normal(len(xb)).astype(np.float32)
                updater.update_heteros(output_states=net.output_z_buffer, mu_obs=y,
                                       delta_states=net.input_delta_z_buffer)
            elif name in ("remax", "cfsoftmax"):
                y = np.zeros((len(xb), width), dtype=np.float32)
                y[np.arange(len(xb)), rng.integers(0, width, len(xb))] = 1.0
                y = y.reshape(-1)
                updater.update(output_states=net.output_z_buffer, mu_obs=y,
                               var_obs=np.full_like(y, ONE_HOT_SIGMA_V ** 2),
                               delta_states=net.input_delta_z_buffer)
            else:
                y = rng.standard_normal(len(xb) * width).astype(np.float32)
                updater.update(output_states=net.output_z_buffer, mu_obs=y,
                               var_obs=np.ones_like(y), delta_states=net.input_delta_z_buffer)
            net.backward()
            net.step()
        net.save(save)
    net.eval()
    # In batches no larger than the first forward's: pytagi 0.2.1 sizes a residual
    # block's buffers at its first forward and crashes (SIGSEGV) on a larger batch.
    mus, vars_ = [], []
    for at in range(0, len(x), BATCH):
        mu, var = net(x[at:at + BATCH].reshape(-1))
        n = len(x[at:at + BATCH])
        mus.append(np.asarray(mu).reshape(n, -1))
        vars_.append(np.asarray(var).reshape(n, -1))
    np.savez(out, mu=np.concatenate(mus), var=np.concatenate(vars_))


if __name__ == "__main__":
    main()
