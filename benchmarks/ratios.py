#!/usr/bin/env python3
"""Ratio tables for bench_multi_tensor JSON output (python3 standard library only).

Usage: python3 benchmarks/ratios.py cpu.json [--best] [--table | --layouts | --pairs]

Prints, from one run:
  1. each fused case's bandwidth over its matching limit kernel's (same bytes per array):
     unscale_check and scale vs limit/scale, check and sum_squares vs limit/read_sum,
     casts vs limit/copy; targets at >= 16M elements: 0.9 (casts 0.85);
  2. the small-tensor layouts' time over the flat layout's (target <= 1.5): "small" (each
     tensor allocated on its own), "packed" (the same tensors in one contiguous buffer) and
     "reversed" (the small layout's tensors allocated last to first, mostly descending addresses);
  3. libtorch user code's time over ours where the run has torch/ cases
     (target for unscale_check: >= 5).
--table prints instead one summary table: per operation and dtype, each layout's ratio to its
limit kernel at 16M and 64M elements, and small/flat, packed/flat, reversed/flat.
--pairs prints instead the paired cases (pair/<op>/<dtype>/<layout>/N, each iteration one call of
the fused operation and one of its flat limit kernel, alternately first): per operation and
dtype, each layout's median limit_ratio at 16M and 64M (bold: below the target), and how many
cases meet the target; then the same for loop_ratio, the fused call against a plain loop (read
sum, or sign flips in place) over the very memory of its list, which takes out where each
buffer's pages lie; then each small-tensor layout's time over the flat list's, timed in the same
iteration (over_flat, target <= 1.5). Calls milliseconds apart share the host's bandwidth, which separate cases,
timed seconds or minutes apart, do not; each call is timed from memory (after an untimed read
of 128 MiB).
--layouts prints instead what the small, packed and reversed layouts cost the plain limit loops
run over their memory (limit/{read_sum,scale,copy}/{f32,f16}/{layout}/N against the flat limit
kernel over as many bytes), and each fused case on those layouts against that loop.
With repetitions, the median of each case is used; --best takes each case's fastest
repetition instead (fused and limit kernels alike), which on a shared host filters out the
repetitions another tenant's memory traffic slowed down.
"""
import json
import statistics
import sys

SIZE = {"f32": 4, "f16": 2, "bf16": 2}
LIMIT_FOR = {"unscale_check": "scale", "scale": "scale", "check": "read_sum", "sum_squares": "read_sum", "cast": "copy"}


BEST = "--best" in sys.argv
TABLE = "--table" in sys.argv
LAYOUT_TABLES = "--layouts" in sys.argv
PAIRS = "--pairs" in sys.argv
LAYOUTS = ("gpt", "small", "packed", "reversed", "flat")
SCATTERED = ("small", "packed", "reversed")  # the layouts with plain loops over their own memory
SIZES = ("16M", "64M")


def load(path):
    with open(path) as f:
        data = json.load(f)
    runs = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"])
        # --mlfw_timing=cpu runs are named .../process_time and timed by cpu_time.
        b["_time"] = b["cpu_time"] if name.endswith("/process_time") else b["real_time"]
        for suffix in ("/real_time", "/process_time", "/manual_time"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        runs.setdefault(name, []).append(b)
    cases = {}
    for name, bs in runs.items():
        pick_time = min if BEST else statistics.median
        pick_rate = max if BEST else statistics.median
        cases[name] = {
            "limit_ratio": pick_rate(b.get("limit_ratio", 0.0) for b in bs),
            "loop_ratio": pick_rate(b["loop_ratio"] for b in bs) if "loop_ratio" in bs[0] else None,
            "over_flat": pick_time(b["over_flat"] for b in bs) if "over_flat" in bs[0] else None,
            "time": pick_time(b["_time"] for b in bs),
            "bps": pick_rate(b.get("bytes_per_second", 0.0) for b in bs),
            "unit": bs[0]["time_unit"],
        }
    return data.get("context", {}), cases


def elements(size_name):
    return int(size_name[:-1]) << (20 if size_name.endswith("M") else 10)


def size_name(n):
    return "%dM" % (n >> 20) if n % (1 << 20) == 0 else "%dK" % (n >> 10)


def fmt(x):
    return "%.2f" % x


def time_ratio_cell(cases, a, b):
    """Time of case a over time of case b as a table cell (bold: above 1.5), "" when one is missing."""
    if a not in cases or b not in cases:
        return ""
    r = cases[a]["time"] / cases[b]["time"]
    return "**%s**" % fmt(r) if r > 1.5 else fmt(r)


def width_of(op, dt):
    """Bytes per element of the array a fused case's limit kernel is matched to (casts: the wider side)."""
    return max(SIZE[d] for d in dt.split("_to_")) if op == "cast" else SIZE[dt]


def limit_ratio(cases, name):
    """Bandwidth of fused case `name` over its matching limit kernel's, or None."""
    parts = name.split("/")
    op, dt, n = parts[1], parts[2], parts[4]
    limit = "limit/%s/f32/flat/%s" % (LIMIT_FOR[op], size_name(elements(n) * width_of(op, dt) // 4))
    if name not in cases or limit not in cases:
        return None
    return cases[name]["bps"] / cases[limit]["bps"]


def summary_table(cases):
    """One row per op and dtype: ratio to the limit kernel per layout and size (bold: below the
    target), then small/flat, packed/flat and reversed/flat per size (bold: above 1.5)."""
    header = ["op", "dtype"] + ["%s %s" % (l, n) for n in SIZES for l in LAYOUTS]
    header += ["%s/flat %s" % (l, n) for l in SCATTERED for n in SIZES]
    print("| " + " | ".join(header) + " |")
    print("|---|---|" + "---:|" * (len(header) - 2))
    rows = sorted({tuple(n.split("/")[1:3]) for n in cases if n.startswith("fused/")})
    for op, dt in rows:
        target = 0.85 if op == "cast" else 0.9
        cells = [op, dt]
        for n in SIZES:
            for l in LAYOUTS:
                r = limit_ratio(cases, "fused/%s/%s/%s/%s" % (op, dt, l, n))
                cells.append("" if r is None else ("**%s**" % fmt(r) if r < target else fmt(r)))
        for l in SCATTERED:
            for n in SIZES:
                cells.append(time_ratio_cell(cases, "fused/%s/%s/%s/%s" % (op, dt, l, n), "fused/%s/%s/flat/%s" % (op, dt, n)))
        print("| " + " | ".join(cells) + " |")


def target_of(op):
    return 0.85 if op == "cast" else 0.9


def paired_table(cases, key, columns, label, passes, score, worst, summary):
    """One row per op and dtype of the pair/ cases' counter `key`, one column per (layout, size)
    in `columns` (bold: `passes` false); then per layout how many pass and the `worst` `score`."""
    header = ["op", "dtype"] + [label(l, n) for l, n in columns]
    print("| " + " | ".join(header) + " |")
    print("|---|---|" + "---:|" * (len(header) - 2))
    rows = sorted({tuple(n.split("/")[1:3]) for n in cases if n.startswith("pair/")})
    met = {}  # layout: [passing, cases, scores]
    for op, dt in rows:
        cells = [op, dt]
        for l, n in columns:
            case = cases.get("pair/%s/%s/%s/%s" % (op, dt, l, n))
            r = None if case is None else case.get(key)
            if r is None:
                cells.append("")
                continue
            m = met.setdefault(l, [0, 0, []])
            m[0] += passes(op, r)
            m[1] += 1
            m[2].append(score(op, r))
            cells.append(fmt(r) if passes(op, r) else "**%s**" % fmt(r))
        print("| " + " | ".join(cells) + " |")
    print()
    print("| layout | %s |" % summary)
    print("|---|---:|---:|")
    for l, (ok, count, scores) in met.items():
        print("| %s | %d of %d | %s |" % (l, ok, count, fmt(worst(scores))))


def pairs_table(cases, key="limit_ratio"):
    """Each layout's paired bandwidth ratio `key` at 16M and 64M against the target (worst: ratio
    over target)."""
    paired_table(cases, key, [(l, n) for n in SIZES for l in LAYOUTS], lambda l, n: "%s %s" % (l, n),
                 lambda op, r: r >= target_of(op), lambda op, r: r / target_of(op), min,
                 "cases meeting the target | worst ratio / target")


def over_flat_table(cases):
    """Each small-tensor layout's paired time over the flat list's (target: at most 1.5)."""
    paired_table(cases, "over_flat", [(l, n) for l in SCATTERED for n in SIZES], lambda l, n: "%s/flat %s" % (l, n),
                 lambda op, r: r <= 1.5, lambda op, r: r, max, "cases within 1.5x of flat | worst")


def layout_limit(op, dt, layout, n):
    """The plain limit loop over the memory of `layout`'s list that matches fused case (op, dt):
    16-bit lists use the FP16 list's loop (same sizes, same element size), casts the copy loop of
    their wider side."""
    return "limit/%s/%s/%s/%s" % (LIMIT_FOR[op], "f32" if width_of(op, dt) == 4 else "f16", layout, n)


def layout_tables(cases):
    """Table 1: time of each plain loop over a layout's memory / time of the flat limit kernel
    over as many bytes (bold: above 1.5). Table 2: fused bandwidth / the same layout's plain loop
    bandwidth, and fused layout/flat next to the plain loop's layout/flat."""
    print("| loop | dtype | " + " | ".join("%s/flat %s" % (l, n) for l in SCATTERED for n in SIZES) + " |")
    print("|---|---|" + "---:|" * (len(SCATTERED) * len(SIZES)))
    for op in ("read_sum", "scale", "copy"):
        for dt in ("f32", "f16"):
            cells = [op, dt]
            for l in SCATTERED:
                for n in SIZES:
                    flat = "limit/%s/f32/flat/%s" % (op, size_name(elements(n) * SIZE[dt] // 4))
                    cells.append(time_ratio_cell(cases, "limit/%s/%s/%s/%s" % (op, dt, l, n), flat))
            print("| " + " | ".join(cells) + " |")
    print()
    header = ["op", "dtype"] + ["small vs loop %s" % n for n in SIZES] + ["small/flat %s" % n for n in SIZES]
    header += ["loop small/flat %s" % n for n in SIZES]
    print("| " + " | ".join(header) + " |")
    print("|---|---|" + "---:|" * (len(header) - 2))
    rows = sorted({tuple(n.split("/")[1:3]) for n in cases if n.startswith("fused/")})
    for op, dt in rows:
        cells = [op, dt]
        for n in SIZES:
            a, loop = "fused/%s/%s/small/%s" % (op, dt, n), layout_limit(op, dt, "small", n)
            cells.append(fmt(cases[a]["bps"] / cases[loop]["bps"]) if a in cases and loop in cases else "")
        for n in SIZES:
            cells.append(time_ratio_cell(cases, "fused/%s/%s/small/%s" % (op, dt, n), "fused/%s/%s/flat/%s" % (op, dt, n)))
        for n in SIZES:
            flat = "limit/%s/f32/flat/%s" % (LIMIT_FOR[op], size_name(elements(n) * width_of(op, dt) // 4))
            cells.append(time_ratio_cell(cases, layout_limit(op, dt, "small", n), flat))
        print("| " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    context, cases = load(sys.argv[1])
    if TABLE:
        summary_table(cases)
        return 0
    if LAYOUT_TABLES:
        layout_tables(cases)
        return 0
    if PAIRS:
        print("Fused bandwidth over the flat limit kernel's (limit_ratio):\n")
        pairs_table(cases)
        if any(c.get("loop_ratio") is not None for c in cases.values()):
            print("\nFused bandwidth over the same plain loop over the list's own memory (loop_ratio; casts: none):\n")
            pairs_table(cases, "loop_ratio")
        if any(c.get("over_flat") is not None for c in cases.values()):
            print("\nTime over the same operation's on the flat list, timed in the same iteration (over_flat):\n")
            over_flat_table(cases)
        return 0
    print("instruction set: %s, OpenMP threads: %s, timing: %s, load average: %s" % (
        context.get("mlfw_instruction_set", "?"), context.get("mlfw_omp_threads", "?"),
        context.get("mlfw_timing", "real"), context.get("load_avg", "?")))
    misses = []

    print("\n## Fused op bandwidth / limit kernel bandwidth\n")
    print("| case | GB/s | limit | limit GB/s | ratio | target |")
    print("|---|---:|---|---:|---:|---:|")
    for name, c in sorted(cases.items()):
        parts = name.split("/")
        if parts[0] != "fused":
            continue
        op, dt, layout, n = parts[1], parts[2], parts[3], parts[4]
        limit = "limit/%s/f32/flat/%s" % (LIMIT_FOR[op], size_name(elements(n) * width_of(op, dt) // 4))
        if limit not in cases:
            continue
        ratio = c["bps"] / cases[limit]["bps"]
        target = 0.85 if op == "cast" else 0.9
        checked = elements(n) >= (16 << 20)
        verdict = ""
        if checked:
            verdict = ">= %.2f %s" % (target, "ok" if ratio >= target else "MISS")
            if ratio < target:
                misses.append("%s: %.2f < %.2f" % (name, ratio, target))
        print("| %s | %s | %s | %s | %s | %s |" % (name, fmt(c["bps"] / 1e9), limit, fmt(cases[limit]["bps"] / 1e9),
                                                  fmt(ratio), verdict))

    print("\n## Small-tensor layouts: time / flat layout time\n")
    print("| case | layout | time | flat | ratio | target |")
    print("|---|---|---:|---:|---:|---:|")
    for name, c in sorted(cases.items(), key=lambda item: (item[0].split("/")[3:4], item[0])):
        parts = name.split("/")
        if parts[0] != "fused" or parts[3] not in SCATTERED:
            continue
        flat = "/".join(parts[:3] + ["flat", parts[4]])
        if flat not in cases:
            continue
        ratio = c["time"] / cases[flat]["time"]
        ok = ratio <= 1.5
        if not ok:
            misses.append("%s: %s/flat %.2f > 1.5" % (name, parts[3], ratio))
        print("| %s | %s | %.3g %s | %.3g %s | %s | <= 1.5 %s |" % (
            "/".join(parts[1:3] + [parts[4]]), parts[3], c["time"], c["unit"], cases[flat]["time"],
            cases[flat]["unit"], fmt(ratio), "ok" if ok else "MISS"))

    torch = [n for n in cases if n.startswith("torch/")]
    if torch:
        print("\n## libtorch user code time / ours (higher is better for us)\n")
        print("| case | ours | libtorch | speedup | target |")
        print("|---|---:|---:|---:|---:|")
        for name in sorted(torch):
            ours = "fused/" + name[len("torch/"):]
            if ours not in cases:
                continue
            speedup = cases[name]["time"] / cases[ours]["time"]
            target = ""
            if name.startswith("torch/unscale_check/"):
                target = ">= 5 " + ("ok" if speedup >= 5 else "MISS")
                if speedup < 5:
                    misses.append("%s: speedup %.2f < 5" % (ours, speedup))
            print("| %s | %.3g %s | %.3g %s | %s | %s |" % (name[len("torch/"):], cases[ours]["time"],
                                                           cases[ours]["unit"], cases[name]["time"],
                                                           cases[name]["unit"], fmt(speedup), target))

    print("\n## Misses\n")
    for m in misses:
        print("- " + m)
    if not misses:
        print("none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
