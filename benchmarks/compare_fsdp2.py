#!/usr/bin/env python3
"""PyTorch FSDP2 on the model of bench_fsdp_step (the peer of the library's FSDP step; not CI).

Setup (once):  python3 -m venv .venv && .venv/bin/pip install torch
Run both, same ranks, one thread a rank:
    OMP_NUM_THREADS=1 mpiexec -n 2 --oversubscribe build/benchmarks/bench_fsdp_step \
        --benchmark_out=fsdp_step.json --benchmark_out_format=json
    OMP_NUM_THREADS=1 .venv/bin/python -m torch.distributed.run --nproc-per-node 2 \
        benchmarks/compare_fsdp2.py --library fsdp_step.json

The model: 12 units, each one 4M-element FP32 parameter w with `y = x + sum(w * c)` (c a constant
FP32 buffer), fully_shard per unit and on the root with MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32), reshard_after_forward=False (one all-gather a unit a step, as the library
benchmark does), gloo, torch.optim.Adam (foreach). Step = forward, backward, optimizer step,
zero_grad. Rank 0 prints the mean and best step time (slowest rank), the peak RSS (ru_maxrss,
largest rank) absolute and grown over the value before the model was built, and, with
--library, the ratios against bench_fsdp_step's JSON.
"""
import argparse
import json
import os
import resource
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

UNITS = 12
UNIT_ELEMENTS = 1 << 22
STEPS = 6


class Unit(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((UNIT_ELEMENTS,), 0.01))
        self.register_buffer("c", c, persistent=False)

    def forward(self, x):
        return x + (self.weight * self.c).sum()


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def slowest(value):
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", help="bench_fsdp_step JSON to compare with")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo")
    rss_before = peak_rss_mib()
    c = (torch.arange(UNIT_ELEMENTS) % 97).float() * 1e-3
    model = torch.nn.Sequential(*[Unit(c) for _ in range(UNITS)])
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for unit in model:
        fully_shard(unit, mp_policy=policy, reshard_after_forward=False)
    fully_shard(model, mp_policy=policy, reshard_after_forward=False)
    adam = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    x = torch.zeros(())

    def step():
        loss = model(x)
        loss.backward()
        adam.step()
        adam.zero_grad(set_to_none=True)
        return loss.item()

    step()  # warm-up
    times = []
    for _ in range(STEPS):
        dist.barrier()
        start = time.perf_counter()
        step()
        times.append(slowest(time.perf_counter() - start))
    rss_peak = slowest(peak_rss_mib())
    rss_growth = slowest(peak_rss_mib() - rss_before)
    if dist.get_rank() == 0:
        mean_ms = 1e3 * sum(times) / len(times)
        best_ms = 1e3 * min(times)
        print(f"FSDP2: step mean {mean_ms:.1f} ms, best {best_ms:.1f} ms; "
              f"peak RSS {rss_peak:.0f} MiB (grown {rss_growth:.0f} MiB) on {dist.get_world_size()} ranks")
        if args.library:
            with open(args.library) as f:
                run = next(b for b in json.load(f)["benchmarks"] if b["name"].startswith("BM_FsdpStep"))
            lib_mean, lib_best = run["real_time"], run["best_step_ms"]
            lib_peak, lib_growth = run["rss_peak_MiB_max_rank"], run["rss_growth_MiB_max_rank"]
            print(f"library: step mean {lib_mean:.1f} ms, best {lib_best:.1f} ms; "
                  f"peak RSS {lib_peak:.0f} MiB (grown {lib_growth:.0f} MiB)")
            print("| measure | FSDP2 | library | FSDP2 / library |")
            print("|---|---:|---:|---:|")
            print(f"| step, mean (ms) | {mean_ms:.1f} | {lib_mean:.1f} | {mean_ms / lib_mean:.2f} |")
            print(f"| step, best (ms) | {best_ms:.1f} | {lib_best:.1f} | {best_ms / lib_best:.2f} |")
            print(f"| peak RSS (MiB) | {rss_peak:.0f} | {lib_peak:.0f} | {rss_peak / lib_peak:.2f} |")
            print(f"| RSS growth (MiB) | {rss_growth:.0f} | {lib_growth:.0f} | {rss_growth / lib_growth:.2f} |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
