#!/usr/bin/env python3
"""Writes torch_optimizers_reference.txt: trajectories of torch.optim.Adam, AdamW and SGD
(foreach=False, on the CPU), the reference of tests/optimizers/TorchOptimizerReferenceTests.cpp.
Run outside CI, where torch is installed, on a CPU with AVX-512:

    python3 tests/data/gen_torch_optimizers.py > tests/data/torch_optimizers_reference.txt

The bits of torch's CPU optimizers depend on the kernels ATen dispatches to: its vectorised
AVX2 and AVX-512 kernels fuse add(alpha=), addcmul, lerp and the like into FMAs, its default
(portable) kernels do not. The script therefore runs each trajectory once per CPU capability, in
a child process with ATEN_CPU_CAPABILITY set (default, avx2, avx512), and checks that torch
reports the capability asked for.

Format (one record a line, '#' lines are comments; floats are FP32 bits as 8 hex digits):
    sizes <n0> <n1> ...                  element counts of the parameter tensors
    steps <s>                            steps in every trajectory
    checkpoints <k0> <k1> ...            steps after which the state is recorded
    P <tensor> <hex> ...                 the initial parameters of tensor <tensor>
    G <step> <tensor> <hex> ...          the gradient of step <step> (1-based)
    case <name> <optimizer> <key>=<value> ...   the hyperparameters, as a torch user writes them
                                         (Python floats in repr(): the double torch holds)
    R <capability> <case> <step> <tensor> <state> <hex> ...   torch's state after step <step>:
                                         param, exp_avg, exp_avg_sq or momentum_buffer
Sizes cover the vector bodies and scalar tails of every width (8 and 16 floats, torch's loops
take 2 vectors at a time); gradients span magnitudes from 2^-6 to 2^3 and include zeros.
"""
import os
import subprocess
import sys

import numpy as np
import torch

SIZES = (37, 256, 515)
STEPS = 20
CHECKPOINTS = (1, STEPS)
CAPABILITIES = ("default", "avx2", "avx512")
SEED = 20261128

# name, optimizer, hyperparameters (keyword arguments of the torch optimizer).
CASES = (
    ("adam", "Adam", dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)),
    ("adam_l2", "Adam", dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)),
    ("adamw", "AdamW", dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)),
    # 1 - beta1 >= 0.5: lerp's other branch (end - (end - self) * (1 - weight)).
    ("adam_low_beta1", "Adam", dict(lr=3e-4, betas=(0.3, 0.99), eps=1e-6, weight_decay=0.0)),
    ("sgd", "SGD", dict(lr=0.01, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False)),
    ("sgd_momentum", "SGD", dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=False)),
    ("sgd_nesterov", "SGD", dict(lr=0.01, momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=True)),
    ("sgd_weight_decay", "SGD", dict(lr=0.05, momentum=0.9, dampening=0.0, weight_decay=1e-4, nesterov=False)),
    ("sgd_plain_weight_decay", "SGD", dict(lr=0.01, momentum=0.0, dampening=0.0, weight_decay=1e-2, nesterov=False)),
    ("sgd_dampening", "SGD", dict(lr=0.01, momentum=0.9, dampening=0.1, weight_decay=1e-4, nesterov=False)),
)

STATE_NAMES = {"Adam": ("exp_avg", "exp_avg_sq"), "AdamW": ("exp_avg", "exp_avg_sq"), "SGD": ("momentum_buffer",)}


def hexes(values):
    return " ".join("%08x" % b for b in np.asarray(values, dtype=np.float32).view(np.uint32))


def inputs():
    """The initial parameters and every step's gradients, from a seeded generator."""
    rng = np.random.default_rng(SEED)
    params = [rng.standard_normal(n).astype(np.float32) for n in SIZES]
    grads = []
    for _ in range(STEPS):
        step = []
        for n in SIZES:
            g = rng.standard_normal(n) * np.exp2(rng.integers(-6, 4, n))
            g[rng.random(n) < 0.02] = 0.0
            step.append(g.astype(np.float32))
        grads.append(step)
    return params, grads


def hyperparameter_text(optimizer, kwargs):
    items = []
    for key, value in kwargs.items():
        if key == "betas":
            items += ["beta1=%r" % value[0], "beta2=%r" % value[1]]
        else:
            items.append("%s=%r" % (key, value))
    return " ".join(items)


def run_capability(capability):
    """Child process: every case's trajectory under the capability torch was started with."""
    got = torch.backends.cpu.get_cpu_capability().lower()
    if got != capability:
        sys.exit("asked ATEN_CPU_CAPABILITY=%s but torch runs %s" % (capability, got))
    torch.set_num_threads(1)
    params0, grads = inputs()
    out = sys.stdout
    for name, optimizer, kwargs in CASES:
        params = [torch.from_numpy(p.copy()) for p in params0]
        opt = getattr(torch.optim, optimizer)(params, foreach=False, **kwargs)
        for step in range(1, STEPS + 1):
            for p, g in zip(params, grads[step - 1]):
                p.grad = torch.from_numpy(g.copy())
            opt.step()
            if step not in CHECKPOINTS:
                continue
            for t, p in enumerate(params):
                out.write("R %s %s %d %d param %s\n" % (capability, name, step, t, hexes(p.detach().numpy())))
                for state in STATE_NAMES[optimizer]:
                    value = opt.state[p].get(state)
                    if value is not None:
                        out.write("R %s %s %d %d %s %s\n" % (capability, name, step, t, state, hexes(value.numpy())))


def main():
    if len(sys.argv) == 2:
        run_capability(sys.argv[1])
        return
    out = sys.stdout
    out.write("# generated by tests/data/gen_torch_optimizers.py with torch %s\n" % torch.__version__)
    out.write("sizes %s\n" % " ".join(str(n) for n in SIZES))
    out.write("steps %d\n" % STEPS)
    out.write("checkpoints %s\n" % " ".join(str(k) for k in CHECKPOINTS))
    params, grads = inputs()
    for t, p in enumerate(params):
        out.write("P %d %s\n" % (t, hexes(p)))
    for step, step_grads in enumerate(grads, start=1):
        for t, g in enumerate(step_grads):
            out.write("G %d %d %s\n" % (step, t, hexes(g)))
    for name, optimizer, kwargs in CASES:
        out.write("case %s %s %s\n" % (name, optimizer, hyperparameter_text(optimizer, kwargs)))
    out.flush()
    for capability in CAPABILITIES:
        env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
        records = subprocess.run([sys.executable, __file__, capability], env=env, check=True, capture_output=True,
                                 text=True).stdout
        out.write(records)


if __name__ == "__main__":
    main()
