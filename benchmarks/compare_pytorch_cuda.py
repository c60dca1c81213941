#!/usr/bin/env python3
"""Compare bench_cuda_kernels results with PyTorch's CUDA kernels (not part of CI).

Run on a machine with a GPU and PyTorch:
    build/benchmarks/bench_cuda_kernels --benchmark_format=json --benchmark_out=cuda.json \\
        --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
    python3 benchmarks/compare_pytorch_cuda.py cuda.json

Builds the same lists as bench_cuda_kernels (layout 0: one tensor of 2^26 elements, 1: 4,096
tensors of 2^14, 2: 10,000 tensors of 1,000; FP32 or FP16; every value 0.25) and times each
call the way the C++ benchmark does: CUDA events on the stream around the whole call, so
host time that leaves the GPU idle counts. What is compared:
  unscale_and_check    torch._amp_foreach_non_finite_check_and_unscale_ + found_inf.item()
                       (GradScaler.unscale_ and a host read of the flag)    vs BM_unscale_and_check
  unscale_device_state the same + torch._amp_update_scale_, no host read   vs BM_unscale_device_state
  scale                torch._foreach_mul_(list, 1.0)                       vs BM_scale
  check_and_sum_squares torch._foreach_norm + vector_norm of the stack + .item()
                       (clip_grad_norm_'s total norm; ours also checks for Inf/NaN)
                                                                            vs BM_check_and_sum_squares
  cast_scaled          torch._foreach_copy_(dst, src) (a cast, no scale, no check; ours also
                       scales and checks)                                   vs BM_cast_scaled
Prints a markdown table: median time per call of each, and PyTorch's over ours (> 1: ours is faster).
"""
import json
import statistics
import sys

import torch

LAYOUTS = {0: (1, 1 << 26), 1: (4096, 1 << 14), 2: (10000, 1000)}
DTYPES = {0: torch.float32, 1: torch.float16}


def make_list(layout, dtype):
    tensors, elements = LAYOUTS[layout]
    return [torch.full((elements,), 0.25, dtype=dtype, device="cuda") for _ in range(tensors)]


def time_call(fn, reps=20):
    """Median milliseconds of fn() between two events on the current stream (after a warm-up)."""
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def torch_cases(layout, dtype_index):
    dtype = DTYPES[dtype_index]
    grads = make_list(layout, dtype)
    found_inf = torch.zeros(1, device="cuda")
    inv_scale = torch.ones(1, device="cuda")
    scale = torch.ones(1, device="cuda")
    growth_tracker = torch.zeros(1, dtype=torch.int32, device="cuda")

    def unscale_and_check():
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        return found_inf.item()

    def unscale_device_state():
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        torch._amp_update_scale_(scale, growth_tracker, found_inf, 2.0, 0.5, 2000)

    def scale_list():
        torch._foreach_mul_(grads, 1.0)

    def norm():
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))).item()

    target = torch.float32 if dtype == torch.float16 else torch.float16
    dst = [torch.empty_like(t, dtype=target) for t in grads]

    def cast():
        torch._foreach_copy_(dst, grads)

    try:
        cast()
    except RuntimeError:  # a PyTorch whose _foreach_copy_ does not cast: what a user writes then

        def cast():
            for d, s in zip(dst, grads):
                d.copy_(s)

    return {
        "BM_unscale_and_check": unscale_and_check,
        "BM_unscale_device_state": unscale_device_state,
        "BM_scale": scale_list,
        "BM_check_and_sum_squares": norm,
        "BM_cast_scaled": cast,
    }


def ours_from(path):
    with open(path) as f:
        data = json.load(f)
    ours = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name", "median") != "median" or b.get("error_occurred"):
            continue
        ours[b["run_name"].replace("/manual_time", "")] = b["real_time"] / 1000.0  # us -> ms
    return ours


def main(path):
    ours = ours_from(path)
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}\n")
    print("| operation | layout | dtype | ours ms | PyTorch ms | PyTorch / ours |")
    print("|---|---|---|---:|---:|---:|")
    for layout in LAYOUTS:
        for dtype_index in DTYPES:
            for name, fn in torch_cases(layout, dtype_index).items():
                key = f"{name}/layout:{layout}/fp16:{dtype_index}"
                theirs = time_call(fn)
                mine = ours.get(key, float("nan"))
                dtype = "FP16" if dtype_index else "FP32"
                tensors, elements = LAYOUTS[layout]
                print(f"| {name[3:]} | {tensors} x {elements} | {dtype} | {mine:.3f} | {theirs:.3f} | "
                      f"{theirs / mine:.2f} |")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
