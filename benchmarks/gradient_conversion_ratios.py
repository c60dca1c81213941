#!/usr/bin/env python3
"""Ratios of bench_gradient_conversion (JSON with --benchmark_repetitions): targets (a) and (b)."""
import json, sys
d = json.load(open(sys.argv[1]))
m = {b["run_name"].split("/")[0]: b for b in d["benchmarks"] if b.get("aggregate_name") == "median"}
cv = {b["run_name"].split("/")[0]: b["real_time"] for b in d["benchmarks"] if b.get("aggregate_name") == "cv"}
copy = max(m["BM_CopyFP32Loop"]["bytes_per_second"], m["BM_CopyFP32Memcpy"]["bytes_per_second"])
n = m["BM_CopyFP32Loop"]["elements"]
t_min = n * 8 / copy * 1e3
p, k, nv = (m[x]["real_time"] for x in ("BM_ProcessGradients", "BM_TwoPassKernels", "BM_NaivePipeline"))
for name, b in m.items():
    print(f"{name:22s} median {b['real_time']:8.1f} ms  cv {cv[name]:.2f}  {b['bytes_per_second']/1e9:6.2f} GB/s")
print(f"elements {n:.0f}; copy bandwidth {copy/1e9:.2f} GB/s; minimal-traffic time {t_min:.1f} ms")
print(f"(a) ProcessGradients / minimal-traffic = {p/t_min:.2f}x (target <= 1.25); two fused kernels alone {k/t_min:.2f}x")
print(f"(b) naive / ProcessGradients = {nv/p:.2f}x (target >= 2)")
