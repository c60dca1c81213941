#!/usr/bin/env python3
"""Compare two builds through their own benchmark binaries (standard library only).

compare_builds.py runs one benchmark binary against two libraries, which needs the same ABI; this
runs each build's own binary of a benchmark program instead, so builds whose headers differ can
be compared. Processes alternate between the builds, round by round, so both see the same host.

  run     python3 benchmarks/compare_binaries.py run --build base=OLD_BUILD --build new=build \\
              --program bench_grad_scaler --rounds 3 --out PREFIX [--mpi N] [-- BENCHMARK_ARGS...]
          Runs OLD_BUILD/benchmarks/PROGRAM and build/benchmarks/PROGRAM (each with its own
          src/ first on LD_LIBRARY_PATH) alternately, ROUNDS times each, writing
          PREFIX.LABEL.ROUND.json; with --mpi N under `mpiexec -n N --oversubscribe` (rank 0
          writes the file). BENCHMARK_ARGS go to the binary (a filter, repetitions, ...).
          OMP_NUM_THREADS and OMP_PROC_BIND come from the environment (default 2, close).
  report  python3 benchmarks/compare_binaries.py report PREFIX base new [--counter NAME ...]
          Per case: each build's median over its processes of the case's median time, the ratio
          new/base, and the same medians of each named counter; then the geometric mean of the
          time ratios.
"""
import glob
import json
import os
import statistics
import subprocess
import sys


def usage():
    print(__doc__)
    sys.exit(2)


def run(args):
    builds, program, rounds, out, mpi, extra = [], None, 3, None, 0, []
    if "--" in args:
        extra = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    it = iter(args)
    for a in it:
        if a == "--build":
            label, _, path = next(it).partition("=")
            builds.append((label, path))
        elif a == "--program":
            program = next(it)
        elif a == "--rounds":
            rounds = int(next(it))
        elif a == "--out":
            out = next(it)
        elif a == "--mpi":
            mpi = int(next(it))
        else:
            usage()
    if len(builds) < 2 or not program or not out:
        usage()
    for r in range(1, rounds + 1):
        for label, path in builds:
            env = dict(os.environ)
            lib = os.path.join(path, "src")
            env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
            env.setdefault("OMP_NUM_THREADS", "2")
            env.setdefault("OMP_PROC_BIND", "close")
            cmd = [os.path.join(path, "benchmarks", program)] + extra + [
                "--benchmark_out=%s.%s.%d.json" % (out, label, r), "--benchmark_out_format=json"]
            if mpi:
                cmd = ["mpiexec", "-n", str(mpi), "--oversubscribe", "-x", "LD_LIBRARY_PATH", "-x", "OMP_NUM_THREADS",
                       "-x", "OMP_PROC_BIND"] + cmd
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            print("round %d: %s done" % (r, label), flush=True)


def load(path, counters):
    """Per case of one process: the median time and the median of each counter over repetitions."""
    with open(path) as f:
        data = json.load(f)
    samples = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"])
        entry = samples.setdefault(name, {"time": []})
        entry["time"].append(b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b.get("time_unit", "ns")])
        for c in counters:
            if c in b:
                entry.setdefault(c, []).append(b[c])
    return {n: {k: statistics.median(v) for k, v in e.items()} for n, e in samples.items()}


def report(prefix, labels, counters):
    per_build = {}
    for label in labels:
        files = sorted(glob.glob("%s.%s.*.json" % (prefix, label)))
        if not files:
            sys.exit("no files %s.%s.*.json" % (prefix, label))
        per_build[label] = [load(f, counters) for f in files]
    names = sorted(set.intersection(*(set().union(*(set(p) for p in per_build[l])) for l in labels)))
    base = labels[0]

    def median(label, name, key):
        values = [p[name][key] for p in per_build[label] if name in p and key in p[name]]
        return statistics.median(values) if values else None

    header = ["case"] + ["%s us" % l for l in labels] + ["%s/%s" % (l, base) for l in labels[1:]]
    header += ["%s %s" % (l, c) for c in counters for l in labels]
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    ratios = {l: [] for l in labels[1:]}
    for name in names:
        times = [median(l, name, "time") for l in labels]
        cells = [name] + ["%.1f" % t for t in times]
        for l, t in zip(labels[1:], times[1:]):
            ratios[l].append(t / times[0])
            cells.append("%.3f" % (t / times[0]))
        for c in counters:
            for l in labels:
                v = median(l, name, c)
                cells.append("" if v is None else "%.3f" % v)
        print("| " + " | ".join(cells) + " |")
    print()
    for l, rs in ratios.items():
        if rs:
            print("%s/%s time: geometric mean %.3f over %d cases, range %.2f-%.2f" % (
                l, base, statistics.geometric_mean(rs), len(rs), min(rs), max(rs)))


def main():
    if len(sys.argv) < 2:
        usage()
    if sys.argv[1] == "run":
        run(sys.argv[2:])
    elif sys.argv[1] == "report" and len(sys.argv) >= 5:
        rest = sys.argv[3:]
        counters = []
        while "--counter" in rest:
            i = rest.index("--counter")
            counters.append(rest[i + 1])
            rest = rest[:i] + rest[i + 2:]
        report(sys.argv[2], rest, counters)
    else:
        usage()


if __name__ == "__main__":
    main()
