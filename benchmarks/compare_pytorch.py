#!/usr/bin/env python3
"""Compare bench_multi_tensor results with current PyTorch (not part of CI).

Setup (once):  python3 -m venv .venv && .venv/bin/pip install torch
Run:           OMP_NUM_THREADS=2 build/benchmarks/bench_multi_tensor --benchmark_filter='^fused/' \
                   --benchmark_out=cpu.json --benchmark_out_format=json
               .venv/bin/python benchmarks/compare_pytorch.py cpu.json --threads 2

Builds the same tensor lists as the C++ benchmark (same layouts, same sizes, values in
[-1, 1)) and times, with the same thread count:
  unscale_check  torch._amp_foreach_non_finite_check_and_unscale_   vs fused/unscale_check
  norm           torch._foreach_norm + vector_norm of the stack       vs fused/sum_squares
  clip           torch.nn.utils.clip_grad_norm_(foreach=True)         vs fused/sum_squares + fused/scale
                 (clip_grad_norm_ computes the norm, then always multiplies by the clamped coefficient)
  cast           t.half() / t.bfloat16() / t.float() per tensor       vs fused/cast (ours writes into
                 preallocated tensors; PyTorch allocates each output, as user code does)
Prints a markdown table: time per call of each and PyTorch time over ours (> 1: we are faster).
"""
import argparse
import json
import statistics
import time

import torch

MULT = 6364136223846793005
INC = 1442695040888963407
MASK = (1 << 64) - 1
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def layout_sizes(layout, total):
    """The same lists as LayoutSizes() in bench_multi_tensor.cpp."""
    if layout == "flat":
        return [total]
    if layout in ("small", "packed", "reversed"):
        sizes, state, s = [], 42, 0
        while s < total:
            state = (state * MULT + INC) & MASK
            size = min(1024 + (state >> 33) % 3073, total - s)
            sizes.append(size)
            s += size
        return sizes
    d = 16
    while 8 * 12 * (d + 16) * (d + 16) <= total // 2:
        d += 16
    positions = min(1024, total // (8 * d))
    body = []
    for _ in range(8):
        body += [d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d]
    return [total - sum(body) - positions * d - 2 * d, positions * d] + body + [d, d]


def make_list(layout, total, dtype):
    sizes = layout_sizes(layout, total)
    if layout == "packed":
        # As ours: the same tensors back to back in one buffer (views of it).
        flat = (torch.rand(sum(sizes), dtype=torch.float32) * 2 - 1).to(dtype)
        return list(flat.split(sizes))
    if layout == "reversed":
        # As ours: the small layout's tensors allocated last to first, as a backward pass does.
        return [(torch.rand(n, dtype=torch.float32) * 2 - 1).to(dtype) for n in reversed(sizes)][::-1]
    return [(torch.rand(n, dtype=torch.float32) * 2 - 1).to(dtype) for n in sizes]


CLOCK = {"real": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter


def time_call(fn, min_time):
    fn()  # warm up (allocator, thread pool)
    samples = []
    start = time.perf_counter()
    while time.perf_counter() - start < min_time or len(samples) < 3:
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return statistics.median(samples)


def load_ours(path):
    with open(path) as f:
        data = json.load(f)
    runs = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"])
        t = b["cpu_time"] if name.endswith("/process_time") else b["real_time"]
        for suffix in ("/real_time", "/process_time"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
        runs.setdefault(name, []).append(t * scale)
    return {name: statistics.median(times) for name, times in runs.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ours", help="bench_multi_tensor JSON output")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds per PyTorch case")
    parser.add_argument("--clock", choices=["real", "cpu"], default="real",
                        help="cpu: process CPU time of all threads (match bench_multi_tensor --mlfw_timing=cpu)")
    args = parser.parse_args()
    global clock
    clock = CLOCK[args.clock]
    torch.set_num_threads(args.threads)
    ours = load_ours(args.ours)
    print("PyTorch %s, %d threads, %s clock" % (torch.__version__, torch.get_num_threads(), args.clock))
    print()
    print("| case | ours (ms) | PyTorch (ms) | PyTorch / ours |")
    print("|---|---:|---:|---:|")
    slower = []

    def row(case, our_time, torch_time):
        ratio = torch_time / our_time
        if ratio < 1.0:
            slower.append(case)
        print("| %s | %.3f | %.3f | %.2f |" % (case, our_time * 1e3, torch_time * 1e3, ratio))

    cases = sorted({tuple(n.split("/")[2:5]) for n in ours if n.startswith("fused/")},
                   key=lambda c: (int(c[2][:-1]), c[1], c[0]))
    for dt, layout, size in cases:
        total = int(size[:-1]) << 20
        if "_to_" in dt:
            continue
        tag = "%s/%s/%s" % (dt, layout, size)
        ts = make_list(layout, total, DTYPES[dt])

        name = "fused/unscale_check/" + tag
        if name in ours:
            found = torch.zeros(1)
            state = {"inv": torch.full((1,), 0.5)}

            def unscale():
                torch._amp_foreach_non_finite_check_and_unscale_(ts, found, state["inv"])
                state["inv"] = 1.0 / state["inv"]  # 0.5, 2, 0.5: values stay put, like the C++ case

            row("unscale_check/" + tag, ours[name], time_call(unscale, args.min_time))

        name = "fused/sum_squares/" + tag
        if name in ours:
            def norm():
                return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(ts, 2)), 2).item()

            row("norm/" + tag, ours[name], time_call(norm, args.min_time))
            scale = "fused/scale/" + tag
            if scale in ours:
                params = []
                for t in ts:
                    p = torch.nn.Parameter(torch.empty_like(t))
                    p.grad = t
                    params.append(p)

                def clip():
                    torch.nn.utils.clip_grad_norm_(params, max_norm=1e30, foreach=True)

                row("clip_grad_norm/" + tag, ours[name] + ours[scale], time_call(clip, args.min_time))
        del ts

    for name in sorted(n for n in ours if n.startswith("fused/cast/")):
        _, _, pair, layout, size = name.split("/")
        src, dst = pair.split("_to_")
        ts = make_list(layout, int(size[:-1]) << 20, DTYPES[src])
        method = {"f16": "half", "bf16": "bfloat16", "f32": "float"}[dst]

        def cast():
            return [getattr(t, method)() for t in ts]

        row("cast %s .%s()/%s/%s" % (pair, method, layout, size), ours[name], time_call(cast, args.min_time))
        del ts

    print()
    print("PyTorch faster than ours on: " + (", ".join(slower) if slower else "no case"))


if __name__ == "__main__":
    main()
