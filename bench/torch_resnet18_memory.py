#!/usr/bin/env python3
"""Peak memory and speed of PyTorch training the CIFAR ResNet18 (issue 28's
reference for tagi-ddp's memory; run beside `cnn_bench ... cifar10_resnet18.json:B`
under /usr/bin/time -v).

  /usr/bin/python3 bench/torch_resnet18_memory.py [--batch 128] [--steps 5] [--threads 2]

The network is the usual CIFAR ResNet18 (3x3 stem, four stages of two basic
blocks, 11.17 M parameters), trained with SGD and momentum on random
3x32x32 inputs and labels; it prints samples/s after a warm-up step and the
peak resident set of the process (ru_maxrss).
"""
import argparse
import resource
import time

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + self.short(x))


def resnet18():
    layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10)]
    return nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    net = resnet18()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, 3, 32, 32)
    y = torch.randint(0, 10, (a.batch,))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    rate = a.steps * a.batch / (time.perf_counter() - start)
    params = sum(t.numel() for t in net.parameters())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"torch {torch.__version__} resnet18 ({params} parameters) B {a.batch} threads "
          f"{a.threads}: {rate:.1f} samples/s, peak RSS {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
