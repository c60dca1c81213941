#!/usr/bin/env python3
"""Ratios of bench_cuda_kernels output: each kernel against its limit (a device copy).

    python3 benchmarks/cuda_ratios.py cuda_kernels.json

Prints one line per kernel and argument pair: the kernel's time, the matching copy's time,
the ratio (copy time / kernel time, 1.0 = at the copy's bandwidth) and the host time of the
call (host_us; when it is close to the kernel's time, the host is the bottleneck). With
repetitions, the medians are used.
"""
import json
import sys

LIMIT = {
    "BM_unscale_and_check": "BM_copy_read_write",
    "BM_unscale_device_state": "BM_copy_read_write",
    "BM_unscale_device_state_graph": "BM_copy_read_write",
    "BM_scale": "BM_copy_read_write",
    "BM_cast_scaled": "BM_copy_cast",
    "BM_has_non_finite": "BM_copy_read_only",
    "BM_check_and_sum_squares": "BM_copy_read_only",
    "BM_fused_adam": "BM_copy_adam",
    "BM_fused_adam_low_bit": "BM_copy_adam_low_bit",
    "BM_fp8_cast_amax": "BM_copy_fp8",
    "BM_fp8_wire_encode": "BM_copy_fp8_wire_encode",
    "BM_fp8_wire_decode_sum": "BM_copy_fp8_wire_decode_sum",
}


def main(path):
    with open(path) as f:
        data = json.load(f)
    time, host = {}, {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name", "median") != "median" or b.get("error_occurred"):
            continue
        name = b["run_name"].replace("/manual_time", "")
        time[name] = b["real_time"]
        host[name] = b.get("host_us", float("nan"))
    for name in sorted(time):
        op, args = name.split("/", 1)
        limit = LIMIT.get(op, "") + "/" + args
        if limit in time:
            print(f"{op:26s} {args:18s} {time[name]:9.1f} us  copy {time[limit]:8.1f} us  "
                  f"ratio {time[limit] / time[name]:.2f}  host {host[name]:7.1f} us")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
