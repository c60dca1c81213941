#!/usr/bin/env python3
"""Compare builds of libmlframework.so with one bench_multi_tensor binary (standard library only).

On a shared or virtual host, large lists run at different speeds in different processes (memory
placement), so two builds are compared over several processes each, run alternately, and every
fused case is also read against the plain limit loop timed in the same process.

  run     python3 benchmarks/compare_builds.py run --lib base=DIR --lib new=DIR \\
              --filter REGEX --rounds 3 --out PREFIX [--bench build/benchmarks/bench_multi_tensor]
          Each round runs every build once, in the order given (DIR holds that build's
          libmlframework.so.*, put first on LD_LIBRARY_PATH); writes PREFIX.LABEL.ROUND.json.
          OMP_NUM_THREADS and OMP_PROC_BIND are taken from the environment (default 2, close).
  report  python3 benchmarks/compare_builds.py report PREFIX base new [more labels...]
          Per fused case: each build's best time over all its processes, each later build's time
          over the first's, and the median over processes of the case's bandwidth over its limit
          loop in the same process (small, packed, reversed: the loop over the same list's memory; flat and
          gpt: the flat limit kernel over as many bytes). Then the geometric mean of the time
          ratios, for the fused cases and for the limit kernels alone: the limit kernels run the
          same code in every build, so theirs is the host's drift between the builds' processes.
"""
import glob
import json
import os
import statistics
import subprocess
import sys

LOOP_FOR = {"unscale_check": "scale", "scale": "scale", "check": "read_sum", "sum_squares": "read_sum", "cast": "copy"}
SIZE = {"f32": 4, "f16": 2, "bf16": 2}


def usage():
    print(__doc__)
    sys.exit(2)


def run(args):
    libs, flt, rounds, out = [], None, 3, None
    bench = "build/benchmarks/bench_multi_tensor"
    it = iter(args)
    for a in it:
        if a == "--lib":
            label, _, path = next(it).partition("=")
            libs.append((label, path))
        elif a == "--filter":
            flt = next(it)
        elif a == "--rounds":
            rounds = int(next(it))
        elif a == "--out":
            out = next(it)
        elif a == "--bench":
            bench = next(it)
        else:
            usage()
    if len(libs) < 2 or not flt or not out:
        usage()
    for r in range(1, rounds + 1):
        for label, path in libs:
            env = dict(os.environ)
            env["LD_LIBRARY_PATH"] = path + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
            env.setdefault("OMP_NUM_THREADS", "2")
            env.setdefault("OMP_PROC_BIND", "close")
            cmd = [bench, "--benchmark_filter=" + flt, "--benchmark_min_time=0.05", "--benchmark_repetitions=3",
                   "--benchmark_enable_random_interleaving=true", "--benchmark_out=%s.%s.%d.json" % (out, label, r),
                   "--benchmark_out_format=json"]
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            print("round %d: %s done" % (r, label), flush=True)


def load(path):
    """Best time and best bandwidth per case of one process."""
    with open(path) as f:
        data = json.load(f)
    cases = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"]).replace("/real_time", "")
        t, bps = b["real_time"], b.get("bytes_per_second", 0.0)
        old = cases.get(name)
        cases[name] = (min(t, old[0]), max(bps, old[1])) if old else (t, bps)
    return cases


def loop_for(name):
    """The limit loop a fused case is read against, in the same process."""
    _, op, dt, layout, n = name.split("/")
    if layout in ("small", "packed", "reversed"):
        loop_dtype = "f32" if op == "cast" or dt == "f32" else "f16"
        return "limit/%s/%s/%s/%s" % (LOOP_FOR[op], loop_dtype, layout, n)
    width = max(SIZE[d] for d in dt.split("_to_")) if op == "cast" else SIZE[dt]
    elements = int(n[:-1]) << (20 if n.endswith("M") else 10) if n[-1] in "MK" else int(n)
    scaled = elements * width // 4
    size = "%dM" % (scaled >> 20) if scaled % (1 << 20) == 0 else "%dK" % (scaled >> 10)
    return "limit/%s/f32/flat/%s" % (LOOP_FOR[op], size)


def report(prefix, labels):
    processes = {}
    for label in labels:
        files = sorted(glob.glob("%s.%s.*.json" % (prefix, label)))
        if not files:
            sys.exit("no files %s.%s.*.json" % (prefix, label))
        processes[label] = [load(f) for f in files]
    best = {label: {} for label in labels}
    for label in labels:
        for cases in processes[label]:
            for name, (t, _) in cases.items():
                best[label][name] = min(t, best[label].get(name, t))
    names = sorted(set.intersection(*(set(best[label]) for label in labels)))
    base = labels[0]
    header = ["case"] + ["%s us" % l for l in labels] + ["%s/%s" % (l, base) for l in labels[1:]]
    header += ["%s vs loop" % l for l in labels]
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for name in (n for n in names if n.startswith("fused/")):
        cells = [name] + ["%.1f" % (best[l][name] / 1e3) for l in labels]
        cells += ["%.3f" % (best[l][name] / best[base][name]) for l in labels[1:]]
        loop = loop_for(name)
        for label in labels:
            rs = [c[name][1] / c[loop][1] for c in processes[label] if name in c and loop in c and c[loop][1] > 0]
            cells.append("%.2f" % statistics.median(rs) if rs else "")
        print("| " + " | ".join(cells) + " |")
    print()
    for label in labels[1:]:
        for kind in ("fused/", "limit/"):
            rs = [best[label][n] / best[base][n] for n in names if n.startswith(kind)]
            if rs:
                print("%s/%s, %s cases: geometric mean %.3f, %d of %d faster, range %.2f-%.2f" % (
                    label, base, kind[:-1], statistics.geometric_mean(rs), sum(r < 1 for r in rs), len(rs), min(rs),
                    max(rs)))


def main():
    if len(sys.argv) < 2:
        usage()
    if sys.argv[1] == "run":
        run(sys.argv[2:])
    elif sys.argv[1] == "report" and len(sys.argv) >= 5:
        report(sys.argv[2], sys.argv[3:])
    else:
        usage()


if __name__ == "__main__":
    main()
