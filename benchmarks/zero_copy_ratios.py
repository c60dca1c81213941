#!/usr/bin/env python3
"""Issue 30's CPU targets from bench_zero_copy JSON (python3 standard library only).

Usage: python3 benchmarks/zero_copy_ratios.py run1.json [run2.json ...]

Each file is one process (bench_zero_copy --benchmark_format=json, with or without
--benchmark_repetitions). Per case, every counter is the median over all repetitions of all
files (aggregate rows are ignored): <c>_ms is already the median call of a repetition, and
<c>_ratio the median of <c>'s time over native's in the same iteration. Prints a markdown table
for docs/BENCHMARKS.md:
  - wrap / native and dlpack / native: time ratios, target <= 1/0.95 (at least 0.95x the speed);
  - control / native: Wrap over the native tensors' own memory (the wrapped path on the same
    pages), target <= 1/0.95 as well;
  - torch / wrap: libtorch's own unscale + check on the same memory over wrap's, target > 1;
  - bytes copied: the largest count of any repetition, target 0 (a non-zero count is also the
    case's error in the JSON).
A cell missing its target is bold. Cases that failed are listed with their error.
"""
import json
import statistics
import sys

SPEED_TARGET = 0.95
CASES = {
    "zero_copy/unscale/f32": "GradScaler unscale + check, FP32 (in place)",
    "zero_copy/unscale/f16": "GradScaler unscale + check, FP16 -> FP32",
    "zero_copy/convert/f16": "GradientConversionLayer FP16 -> FP32, clipping",
}


def strip(name):
    for suffix in ("/manual_time", "/real_time"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def load(paths):
    runs, errors, labels, context = {}, {}, {}, {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        context = context or data.get("context", {})
        for b in data["benchmarks"]:
            if b.get("run_type") == "aggregate":
                continue
            name = strip(b.get("run_name", b["name"]))
            if b.get("error_occurred"):
                errors.setdefault(name, []).append(b.get("error_message", "error"))
                continue
            runs.setdefault(name, []).append(b)
            if b.get("label"):
                labels[name] = b["label"]
    return runs, errors, labels, context


def median(bs, key):
    values = [b[key] for b in bs if key in b]
    return statistics.median(values) if values else None


def cell(value, fmt, ok=None):
    if value is None:
        return "-"
    text = format(value, fmt)
    return text if ok is None or ok(value) else f"**{text}**"


def main(paths):
    runs, errors, labels, context = load(paths)
    limit = 1.0 / SPEED_TARGET
    print(
        f"host: {context.get('host_name', '?')}, {context.get('num_cpus', '?')} CPUs, "
        f"{len(paths)} process(es); median of {sum(len(v) for v in runs.values())} case runs in all"
    )
    print()
    print(
        "| case | native ms | wrap ms | wrap / native | DLPack ms | DLPack / native | control / native "
        "| torch ms | torch / wrap | bytes copied | runs |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, title in CASES.items():
        bs = runs.get(name)
        if not bs:
            continue
        copied = max(b.get("bytes_copied", 0.0) for b in bs)
        print(
            "| "
            + " | ".join(
                [
                    title,
                    cell(median(bs, "native_ms"), ".1f"),
                    cell(median(bs, "wrap_ms"), ".1f"),
                    cell(median(bs, "wrap_ratio"), ".3f", lambda r: r <= limit),
                    cell(median(bs, "dlpack_ms"), ".1f"),
                    cell(median(bs, "dlpack_ratio"), ".3f", lambda r: r <= limit),
                    cell(median(bs, "wrap_native_ratio"), ".3f", lambda r: r <= limit),
                    cell(median(bs, "torch_ms"), ".1f"),
                    cell(median(bs, "torch_over_wrap"), ".2f", lambda r: r > 1.0),
                    cell(copied, ".0f", lambda c: c == 0),
                    str(len(bs)),
                ]
            )
            + " |"
        )
    print()
    print(f"Targets: wrap / native and DLPack / native <= {limit:.3f} (>= {SPEED_TARGET}x native's speed), "
          "torch / wrap > 1, bytes copied 0.")
    for name, label in sorted(labels.items()):
        print(f"- {name}: {label}")
    for name, messages in sorted(errors.items()):
        print(f"- {name} FAILED ({len(messages)} run(s)): {messages[0]}")
    return 1 if errors else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
