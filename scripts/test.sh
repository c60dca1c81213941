#!/usr/bin/env bash
# Installs what is missing, then builds and tests twice, fuzzes and lints.
# This is README's test command; .ci/run calls it.
#
#  1. release:  Release build with -Werror, every test (ctest).
#  2. sanitize: ASan + UBSan build with clang (-fno-sanitize-recover: any report fails the
#               test), every test again, OpenMP and MPI ones included.
#  3. fuzz:     each libFuzzer target for MLFW_FUZZ_SECONDS (10; scripts/fuzz.sh).
#  4. lint:     clang-format and clang-tidy on our sources (scripts/lint.sh); when it comes after
#               the release step, it starts right after it at the lowest priority, beside the
#               other steps (see below).
#
# Every step runs even when an earlier one failed, so one CI log shows all
# problems; the script fails when any step failed. MLFW_CI_STEPS picks steps
# (default "release sanitize fuzz lint"); build dirs: MLFW_BUILD_DIR (build),
# MLFW_SANITIZE_BUILD_DIR (build-sanitize), MLFW_FUZZ_BUILD_DIR (build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# The test setup includes libtorch, so the libtorch_interop sample is built and run as a test.
MLFW_SETUP_TORCH=1 scripts/setup.sh
steps=${MLFW_CI_STEPS:-release sanitize fuzz lint}
jobs=$(nproc)
build=${MLFW_BUILD_DIR:-build}
sanitize_build=${MLFW_SANITIZE_BUILD_DIR:-build-sanitize}
# 10 s per fuzz target in CI (the targets run one per core): 7 targets take 40 s on 2 cores, and
# the fuzz step about 3.5 minutes with its clang build (197 s measured; each step prints its
# time). Run scripts/fuzz.sh longer by hand.
export MLFW_FUZZ_SECONDS=${MLFW_FUZZ_SECONDS:-10}
# A test that hangs (a rank waiting forever) fails after this many seconds
# instead of stalling CI; suites set tighter TIMEOUT properties themselves.
test_timeout=300

failed=()
summary=()
# User + sys seconds of all finished children of this shell, into $cpu_seconds
# (`times` must run in this shell, not in a $(...) subshell, to see them).
times_file=$(mktemp)
child_cpu_seconds() {
  times >"$times_file"
  cpu_seconds=$(tail -n 1 "$times_file" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }')
}

step() {
  local name=$1
  shift
  echo "==== $name"
  # A subshell outside any `if`, so `set -e` stops the step at its first failure.
  # Wall clock from SECONDS, CPU from the children's user + sys totals of `times`.
  local start=$SECONDS cpu_before
  child_cpu_seconds
  cpu_before=$cpu_seconds
  set +e
  (
    set -e
    "$@"
  )
  local rc=$?
  set -e
  record_step "$name" "$rc" "$((SECONDS - start)) s wall" "$cpu_before"
}

# Adds step $1's line to the summary: its exit status $2, its wall-clock time as text $3, and the
# CPU time of the children finished since $4 (a child_cpu_seconds reading).
record_step() {
  child_cpu_seconds
  local times
  times="$3, $(awk -v a="$cpu_seconds" -v b="$4" 'BEGIN { printf "%.0f", a - b }') s CPU"
  if (($2 == 0)); then
    summary+=("$1: ok ($times)")
  else
    summary+=("$1: FAILED ($times)")
    failed+=("$1")
  fi
}

# The release step builds the default configuration (what `cmake -S . -B build` gives on this
# machine: libtorch-dev is installed, so every optional peer is looked for and one it cannot use
# is skipped with a message), plus only -Werror and the compile database for lint. The defaults
# are passed explicitly so that a reused build dir cannot keep an older choice. The one exception:
# the CUDA objects hold PTX for compute_80 alone (80-virtual) instead of the default machine code
# for sm_80 and sm_90. CI has no GPU, so the objects only prove that every .cu compiles (nvcc's
# front end and its PTX), and no source tests __CUDA_ARCH__'s value. The second architecture cost
# up to 40% of a file's nvcc time (CPU seconds with both and with one: backends/cuda/Cast.cu 23.1
# and 14.2, ScaleUpdate.cu 3.0 and 2.5) and ptxas another third of what was left (Cast.cu 14.6
# against 9.5, LowBitSteps.cu 13.9 against 8.6); scripts/gpu-bundle.sh builds the machine code
# for the GPU it runs on.
#
# MLFW_TEST_COMPILE_OPTIONS=-O1: the test files compile at -O1 (cmake/MlfwOptions.cmake: 30% less
# CPU time than at -O3), the library, samples and benchmarks as Release does; the sanitizer step
# compiles everything at -O1 already.
#
# MLFW_UNITY_TESTS (both build steps): the test files are compiled in batches of 8 per executable
# (MLFW_UNITY_TESTS_BATCH_SIZE) instead of one by one, so their shared headers (Boost.Test, the
# library, the test helpers) are parsed and their templates instantiated once per batch. The test
# files were 760 of the release build's 1222 CPU seconds of compiles; test_amp's 13 files took 36 s
# of CPU as one unity file against 102 s one by one with GCC -O2, and 86 s against about 140 s with
# clang 14 under ASan at -O1. Ten test executables (test_amp, test_core, test_cpu_kernels,
# test_cuda_host, test_cuda_stream_order, test_cuda_device, test_distributed, test_mixed_precision,
# test_optimizers, test_reliability) built as one batch each took 331 s of CPU with GCC (user+sys
# of cmake --build, links included, library from ccache) against 657 s for the same objects compiled
# one by one. Development builds keep it off (per-file rebuilds, ccache hits);
# scripts/lint.sh --with-tests needs such a build, since a unity build's compile database lists the
# batches instead of the test files.
release() {
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMLFW_BENCH_TORCH=ON -DMLFW_WARNINGS_AS_ERRORS=ON \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_CUDA_ARCHITECTURES=80-virtual -DMLFW_UNITY_TESTS=ON -DMLFW_TEST_COMPILE_OPTIONS=-O1
  local start=$SECONDS
  cmake --build "$build" -j"$jobs"
  echo "release: build took $((SECONDS - start)) s"
  ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout "$test_timeout"
}

# The sanitizer pass leaves out what no test runs or what sanitizers cannot see:
# benchmarks (not tests; timing under ASan means nothing) and the CUDA backend
# (nvcc does not instrument device code, the ASan runtime and the CUDA driver
# clash over the address space without protect_shadow_gap=0, and CUDA tests
# skip on GPU-less CI anyway), which also saves the nvcc time twice over.
# Samples stay in: their smoke tests run them.
sanitize() {
  # -O1 -g1 instead of RelWithDebInfo's -O2 -g: the build takes about half as long on 2 cores
  # (measured 345 s against 620-710 s), and ASan's reports keep file and line.
  # MLFW_PRECOMPILE_HEADERS: the test files load Boost.Test's header precompiled instead of
  # parsing it each time, 15% less compile time each (measured 34.5 s against 29.9 s CPU for
  # tests/amp/GradScalerTests.cpp); code generation under the sanitizers is the rest. The release
  # build keeps parsing every header as written, so a test file missing an include still fails.
  # clang 14 instead of GCC 12 (the release step's compiler): it compiles a file under the
  # sanitizers in about half the CPU time (tests/amp/GradScalerTests.cpp 18.4 s against 34.5 s);
  # the whole build took 1205 s of CPU time, fresh build dir without ccache, on the loaded machine
  # (GCC: 896 s wall on 2 cores in the last clean-clone CI run, about 1700 s of CPU), and the
  # step with its ctest about 1990 s against 2783 s.
  # The code is thus also compiled, with -Werror, by a second compiler; OpenMP here is clang's
  # libomp, libgomp in the release step. The libtorch sample, which clang 14 cannot compile, is
  # left out of sanitizer builds anyway (samples/libtorch_interop/CMakeLists.txt).
  cmake -S . -B "$sanitize_build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLFW_WARNINGS_AS_ERRORS=ON \
    -DCMAKE_CXX_COMPILER="$(command -v clang++-14 || command -v clang++)" \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DMLFW_PRECOMPILE_HEADERS=ON \
    -DMLFW_SANITIZE=address,undefined -DMLFW_BUILD_BENCHMARKS=OFF -DMLFW_ENABLE_CUDA=OFF -DMLFW_UNITY_TESTS=ON
  local start=$SECONDS
  cmake --build "$sanitize_build" -j"$jobs"
  echo "sanitize: build took $((SECONDS - start)) s"
  # fast_unwind_on_malloc=0: Open MPI is built without frame pointers, so only
  # the slow unwinder sees its frames and the suppressions can match them.
  # intercept_tls_get_addr=0: LeakSanitizer's exit-time scan read a bogus dynamic-TLS range
  # ("DTLS 7 at 0x4af0-0x400005bf2") and its tracer crashed (signal 11, "LeakSanitizer has
  # encountered a fatal error") in test_distributed.mpi4.FsdpDeviceResident, every rank having
  # passed; it did so on every run for a while, then not (2026-11-23). The dynamic TLS is Open
  # MPI's dlopen'ed components'; without the interception LSan does not scan it as a root.
  ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:halt_on_error=1:intercept_tls_get_addr=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    LSAN_OPTIONS=suppressions=$root/scripts/sanitizers/lsan.supp \
    ctest --test-dir "$sanitize_build" --output-on-failure -j"$jobs" --timeout "$test_timeout"
}

fuzz() { scripts/fuzz.sh "$MLFW_FUZZ_SECONDS"; }
lint() { scripts/lint.sh "$build"; }

# Lint needs nothing but the release step's compile database, and the steps between them leave a
# core idle for minutes: ranks sleeping in their waits and passive OpenMP workers in the sanitizer
# step's tests, configure runs, links and the last compiles of each build. So when lint comes after
# the release step, it starts right after it, at the lowest priority (nice 19: the builds and tests
# take the cores whenever they want them), and its step waits for it and prints what it found.
lint_pid=""
lint_log=$(mktemp)
trap 'rm -f "$times_file" "$lint_log"; [[ -z $lint_pid ]] || kill "$lint_pid" 2>/dev/null || true' EXIT
start_lint() {
  lint_start=$SECONDS
  nice -n 19 scripts/lint.sh "$build" >"$lint_log" 2>&1 &
  lint_pid=$!
}
finish_lint() {
  echo "==== lint (started after the release step, $((SECONDS - lint_start)) s ago, at nice 19)"
  local start=$SECONDS cpu_before rc=0
  child_cpu_seconds
  cpu_before=$cpu_seconds
  wait "$lint_pid" || rc=$?
  lint_pid=""
  cat "$lint_log"
  record_step lint "$rc" "$((SECONDS - start)) s wall waited of $((SECONDS - lint_start)) s in the background" "$cpu_before"
}

remaining=" $steps "
for name in $steps; do
  remaining=${remaining/ $name / }
  if [[ $name == lint && -n $lint_pid ]]; then
    finish_lint
    continue
  fi
  step "$name" "$name"
  if [[ $name == release && $remaining == *" lint "* ]]; then
    start_lint
  fi
done

echo "==== summary"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
