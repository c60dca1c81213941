#!/usr/bin/env python3
"""GradScalerContext's per-iteration cost on small lists against torch.amp.GradScaler("cpu").

Not part of CI (needs PyPI torch in a virtual environment).

Run, on an otherwise idle machine, alternating the two a few times:
    build/benchmarks/bench_grad_scaler --benchmark_filter=BM_Context_Iteration \
        --benchmark_out=ours.json --benchmark_out_format=json
    .venv/bin/python benchmarks/compare_torch_grad_scaler.py ours.json

The lists are bench_grad_scaler's BM_Context_Iteration/{0,1}: the demo MLP's 4 FP32 gradients
(fc1 128x784, 128; fc2 10x128, 10) and 1,000 FP32 tensors of 1,000 elements, loss scale 65536,
growth interval out of reach. Each iteration refills the gradients untimed, then times
scale(loss), step(optimizer) with a no-op optimizer (unscale, non-finite check, skip decision)
and update(): what GradScalerContext's constructor and Step do. Prints the medians of 2,000
iterations of both and torch's over ours (> 1: ours is faster).
"""
import argparse
import json
import statistics
import time

import torch

ITERATIONS = 2000


class NoOpOptimizer(torch.optim.Optimizer):
    """Holds the parameters; its step is free, as bench_grad_scaler's NullOptimizer."""

    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):
        return None


def shapes(case):
    if case == 0:
        return [(128, 784), (128,), (10, 128), (10,)]
    return [(1000,)] * 1000


def torch_median_us(case, threads):
    torch.set_num_threads(threads)
    params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes(case)]
    sources = [65536.0 * (torch.rand(s) * 2 - 1) for s in shapes(case)]
    for p, src in zip(params, sources):
        p.grad = src.clone()
    optimizer = NoOpOptimizer(params)
    scaler = torch.amp.GradScaler("cpu", init_scale=65536.0, growth_interval=1 << 30)
    loss = torch.tensor(1.0)
    times = []
    for i in range(ITERATIONS + 50):
        for p, src in zip(params, sources):
            p.grad.copy_(src)
        t0 = time.perf_counter()
        scaler.scale(loss)
        scaler.step(optimizer)
        scaler.update()
        t1 = time.perf_counter()
        if i >= 50:  # torch's first iterations build its per-device state
            times.append(t1 - t0)
    return 1e6 * statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ours", help="bench_grad_scaler JSON with BM_Context_Iteration")
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    args = parser.parse_args()
    with open(args.ours) as f:
        ours = {b["name"]: b["median_us"] for b in json.load(f)["benchmarks"] if "median_us" in b}
    print(f"torch {torch.__version__}, {args.threads} thread(s); medians of {ITERATIONS} iterations")
    print("| list | GradScalerContext (us) | torch.amp.GradScaler (us) | torch / ours |")
    print("|---|---:|---:|---:|")
    for case, label in ((0, "demo MLP, 4 tensors"), (1, "1,000 x 1,000")):
        name = next((n for n in ours if n.startswith(f"BM_Context_Iteration/{case}")), None)
        if name is None:
            raise SystemExit(f"{args.ours} has no BM_Context_Iteration/{case}")
        theirs = torch_median_us(case, args.threads)
        print(f"| {label} | {ours[name]:.1f} | {theirs:.1f} | {theirs / ours[name]:.2f} |")


if __name__ == "__main__":
    main()
