#!/usr/bin/env bash
# One command for a borrowed GPU machine: runs the CUDA checks from a bundle made here by
# scripts/gpu-bundle.sh and writes one summary file. Run it from the repository root there:
#
#   scripts/gpu-check.sh [--dry-run] [BUNDLE]        (default bundle: gpu-bundle)
#
# Stages, each under its own time limit, all within MLFW_GPU_CHECK_SECONDS (default 450, so the
# whole run ends inside 8 minutes; a stage that would not fit is reported as skipped):
#   probe       the bundle's device test binary finds a GPU (it exits 77 without one)
#   host        test_cuda_host (the host-side CUDA suites)
#   device      test_cuda_device, every suite but the 4 GiB large-tensor one
#   capture     the graph-capture suites and cases (names with Capture or Graph), if any exist
#   large       CudaLargeTensor (> 2^31 elements) and CudaDLPackOffset (DLPack byte_offset)
#   memcheck, racecheck, synccheck
#               compute-sanitizer over the device stage's suites (found on the PATH, under
#               /usr/local/cuda, or in BUNDLE/compute-sanitizer/)
#   bench       bench_cuda_kernels (every kernel against a device copy) + benchmarks/cuda_ratios.py
#   torch       benchmarks/compare_pytorch_cuda.py, when python3 imports torch with CUDA (the
#               GPU machine's own, or wheels installed before this script runs)
#   cpu         bench_optimizers' low-precision steps on the machine's host processor, every core
#               (limit_over_fused: the step against a loop moving the same bytes; on the 2-core
#               development guest the FP8 and stochastic-rounding steps are compute-bound)
#
# MLFW_GPU_CHECK_SKIP lists stages to leave out (for example "racecheck synccheck" when a rerun
# must fit the device time left); they are reported as skipped.
#
# The summary goes to $OUT/gpu-check-summary.txt when OUT is set, else to
# ./gpu-check-summary.txt (MLFW_GPU_CHECK_SUMMARY overrides); the benchmark's JSON and every stage's
# whole log (gpu-check-logs.tar.gz) go beside it.
# Exit status: 0 when every stage that ran passed, 1 when one failed or timed out, 2 when nothing
# could run (no bundle, no GPU). --dry-run prints each stage's command and time limit and runs
# nothing (no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

dry_run=0
bundle=gpu-bundle
for arg in "$@"; do
  case $arg in
    --dry-run) dry_run=1 ;;
    -h | --help)
      sed -n '2,30p' "$0"
      exit 0
      ;;
    -*)
      echo "gpu-check: unknown option $arg" >&2
      exit 2
      ;;
    *) bundle=$arg ;;
  esac
done
bundle=$(cd "$bundle" 2>/dev/null && pwd || echo "$bundle")
budget=${MLFW_GPU_CHECK_SECONDS:-450}
out_dir=${OUT:-$root}
summary=${MLFW_GPU_CHECK_SUMMARY:-$out_dir/gpu-check-summary.txt}
bench_json=$(dirname "$summary")/gpu-check-bench.json
cpu_json=$(dirname "$summary")/gpu-check-cpu.json
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# The large-tensor suite allocates 4 GiB and is run on its own (and not under the sanitizers).
large_suites="CudaLargeTensor:CudaDLPackOffset"
device_filter="!CudaLargeTensor"

# The fused-optimizer suites (CudaFusedOptimizers, CudaLowBitSteps) compare the device steps bit for
# bit with the CPU's AVX2 kernels (the
# AVX-512 ones take MKL's square root, as torch does); CMake sets the same for its CTest entry.
export MLFW_CPU_ISA=avx2
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Libraries the bundle leaves to the GPU machine (CUDA's runtime, NCCL) may live in Python's
# nvidia-* packages there rather than under /usr/local/cuda: add their lib folders.
if command -v python3 >/dev/null 2>&1; then
  while read -r dir; do
    [[ -n $dir ]] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"
  done < <(python3 - <<'EOF' 2>/dev/null || true
import glob, site
for base in site.getsitepackages():
    for lib in sorted(glob.glob(base + "/nvidia/*/lib")):
        print(lib)
EOF
  )
fi

sanitizer=""
for candidate in "$(command -v compute-sanitizer 2>/dev/null || true)" /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer "$bundle/compute-sanitizer/compute-sanitizer"; do
  if [[ -n $candidate && -x $candidate ]]; then
    sanitizer=$candidate
    break
  fi
done

start_time=$SECONDS
results=()
failed=0
details=$logs/details

# run_stage NAME LIMIT_SECONDS COMMAND...: runs COMMAND under `timeout`, at most LIMIT seconds and
# never past the run's budget; records ok / FAILED / TIMEOUT / skipped and the time it took.
run_stage() {
  local name=$1 limit=$2
  shift 2
  if [[ " ${MLFW_GPU_CHECK_SKIP:-} " == *" $name "* ]]; then
    results+=("$(printf '%-10s skipped (MLFW_GPU_CHECK_SKIP)' "$name")")
    return 0
  fi
  local left=$((budget - (SECONDS - start_time)))
  if ((limit > left)); then
    limit=$left
  fi
  if ((dry_run)); then
    printf '%-10s (limit %3d s)  %s\n' "$name" "$limit" "$*"
    return 0
  fi
  if ((limit < 10)); then
    results+=("$(printf '%-10s skipped (out of time)' "$name")")
    return 0
  fi
  local log=$logs/$name.log stage_start=$SECONDS rc=0
  echo "gpu-check: $name (limit $limit s): $*"
  timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1 || rc=$?
  local took=$((SECONDS - stage_start)) status=ok
  if ((rc == 124 || rc == 137)); then
    status=TIMEOUT
  elif ((rc != 0)); then
    status="FAILED (exit $rc)"
  fi
  if [[ $status != ok ]]; then
    failed=1
  fi
  results+=("$(printf '%-10s %-18s %4d s' "$name" "$status" "$took")")
  {
    echo
    echo "== $name: $status, $took s: $*"
    if [[ $status == ok ]]; then
      # The lines that say what passed: Boost.Test's totals, the sanitizer's error count, tables.
      grep -E '^\*\*\*|ERROR SUMMARY|test cases? (passed|failed)|Test (module|suite)|^\||^[A-Za-z_]+/.* [0-9.]+x' \
        "$log" | head -60 || true
    else
      tail -n 40 "$log"
    fi
  } >>"$details"
  echo "gpu-check: $name: $status ($took s)"
}

# Stage commands. Boost.Test: --run_test takes suites separated by ':', '!' excludes one.
device=$bundle/bin/test_cuda_device
host=$bundle/bin/test_cuda_host
bench=$bundle/bin/bench_cuda_kernels
boost_args=(--report_level=short --log_level=test_suite)

if ((!dry_run)); then
  if [[ ! -x $device || ! -x $host ]]; then
    echo "gpu-check: no bundle at $bundle (make one on the development machine with scripts/gpu-bundle.sh and carry it)" >&2
    exit 2
  fi
  mkdir -p "$(dirname "$summary")"
  probe_rc=0
  "$device" --list_content >"$logs/probe.log" 2>&1 || probe_rc=$?
  if ((probe_rc == 77)); then
    reason=$(grep -m1 'SKIPPED' "$logs/probe.log" || echo "no usable CUDA device")
    {
      echo "gpu-check $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname): nothing run"
      echo "$reason"
    } >"$summary"
    echo "gpu-check: $reason: no GPU here, nothing run (summary: $summary)" >&2
    exit 2
  elif ((probe_rc != 0)); then
    echo "gpu-check: $device --list_content failed (exit $probe_rc):" >&2
    tail -n 20 "$logs/probe.log" >&2
    ldd "$device" | grep 'not found' >&2 || true
    exit 2
  fi
  # Graph-capture suites and cases, by name (none is harmless: the stage says so).
  capture_filter=$(awk '/^[A-Za-z0-9_]+\*?$/ { suite = $1; sub(/\*$/, "", suite) }
    /^ +[A-Za-z0-9_]+\*?$/ { name = $1; sub(/\*$/, "", name); if (name ~ /[Cc]apture|[Gg]raph/) print suite "/" name }
    /^[A-Za-z0-9_]+\*?$/ { if (suite ~ /[Cc]apture|[Gg]raph/) print suite }' "$logs/probe.log" | paste -sd: -)
else
  capture_filter="<suites and cases named *Capture* or *Graph* in test_cuda_device --list_content>"
fi

run_stage host 30 "$host" "${boost_args[@]}"
run_stage device 90 "$device" "--run_test=$device_filter" "${boost_args[@]}"
if [[ -n $capture_filter ]]; then
  run_stage capture 45 "$device" "--run_test=$capture_filter" "${boost_args[@]}"
else
  results+=("$(printf '%-10s %-18s' capture 'none (no graph-capture tests in this build)')")
fi
run_stage large 45 "$device" "--run_test=$large_suites" "${boost_args[@]}"
for tool in memcheck racecheck synccheck; do
  if [[ -n $sanitizer ]] || ((dry_run)); then
    limit=60
    [[ $tool == memcheck ]] && limit=75
    # --report-api-errors no: NCCL's communicator set-up probes kernel images its build lacks for
    # this GPU and gets cudaErrorNoKernelImageForDevice by design (72 such reports, all from
    # ncclInitKernelsForDevice); the library's own calls go through one driver that checks every
    # status and throws, so a failing API call still fails the suite.
    run_stage "$tool" "$limit" "${sanitizer:-compute-sanitizer}" --tool "$tool" --report-api-errors no --error-exitcode 3 \
      "$device" "--run_test=$device_filter" --report_level=short
  else
    results+=("$(printf '%-10s %-18s' "$tool" 'skipped (compute-sanitizer not found)')")
  fi
done
# One run of each case at 0.02 s: the 120-odd cases with three repetitions of 0.05 s outran the
# stage's limit (their set-up, 10,000-tensor lists uploaded one by one, costs more than the timing).
run_stage bench 150 "$bench" --benchmark_min_time=0.02 --benchmark_format=json "--benchmark_out=$bench_json"
if ((!dry_run)) && [[ -s $bench_json ]]; then
  python3 benchmarks/cuda_ratios.py "$bench_json" >"$logs/ratios.txt" 2>&1 || true
  { echo; echo "== bench: each kernel against a device copy (benchmarks/cuda_ratios.py)"; cat "$logs/ratios.txt"; } >>"$details"
fi
if ((dry_run)) || python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  run_stage torch 45 python3 benchmarks/compare_pytorch_cuda.py "$bench_json"
else
  results+=("$(printf '%-10s %-18s' torch 'skipped (python3 has no torch with CUDA)')")
fi

# The CPU kernels' own ISA (the export above pins AVX2 for the device suites' comparisons), one
# thread per core.
if [[ -x $bundle/bin/bench_optimizers ]] || ((dry_run)); then
  run_stage cpu 60 env -u MLFW_CPU_ISA OMP_NUM_THREADS="$(nproc)" OMP_PROC_BIND=close "$bundle/bin/bench_optimizers" \
    '--benchmark_filter=^lowbit/.*/(gpt64M|shards12x2M)' --benchmark_min_time=0.2 --benchmark_format=json \
    "--benchmark_out=$cpu_json"
else
  results+=("$(printf '%-10s %-18s' cpu 'skipped (no bench_optimizers in the bundle)')")
fi
if ((!dry_run)) && [[ -s $cpu_json ]]; then
  {
    echo
    echo "== cpu: low-precision steps on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs))"
    python3 - "$cpu_json" <<'EOF' 2>&1 || true
import json, sys
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    label = "limit_over_fused" if "limit_over_fused" in b else "fp32_over_8bit"
    print(f"{b['name']:50s} {b['real_time']:9.2f} ms  {label} {b.get(label, float('nan')):.2f}")
EOF
  } >>"$details"
fi

if ((dry_run)); then
  echo "summary would go to $summary (benchmark JSON: $bench_json); compute-sanitizer: ${sanitizer:-not found here}"
  exit 0
fi

{
  echo "gpu-check $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $((SECONDS - start_time)) s, bundle $bundle"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
  grep -m1 '^CUDA device' "$logs/probe.log" 2>/dev/null || true
  echo "compute-sanitizer: ${sanitizer:-not found}"
  echo
  printf '%s\n' "${results[@]}"
  cat "$details" 2>/dev/null || true
} >"$summary"
tar czf "$(dirname "$summary")/gpu-check-logs.tar.gz" -C "$logs" . 2>/dev/null || true
echo "gpu-check: summary in $summary"
printf '%s\n' "${results[@]}"
exit "$failed"
