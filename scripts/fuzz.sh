#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, own build dir) and runs
# each one for a fixed time over its corpus in fuzz/corpus/<target>/.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Defaults: MLFW_FUZZ_SECONDS or 60 seconds, every target in fuzz/FuzzTargets.cmake,
# build dir MLFW_FUZZ_BUILD_DIR or build-fuzz. New inputs the fuzzer finds go to
# <build>/corpus-new/<target>/ (the repository's corpus is read, never written;
# merge good finds in by hand with -merge=1). A crash leaves its input in
# <build>/artifacts/ and fails the script: add that input to
# fuzz/corpus/<target>/ and a test to tests/reliability/, then fix the bug.
# The targets run side by side, as many at a time as there are cores (nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-${MLFW_FUZZ_SECONDS:-60}}
shift || true
build=${MLFW_FUZZ_BUILD_DIR:-build-fuzz}
clangxx=$(command -v clang++-14 || command -v clang++)

mkdir -p "$build"
# -O1 -g1 instead of RelWithDebInfo's -O2 -g, as in scripts/test.sh's sanitizer build: the library
# compiles in about 20% less CPU time (clang 14 with ASan, UBSan and libFuzzer's coverage:
# distributed/fsdp/FSDP.cpp 8.2 s against 6.7 s, amp/GradScaler.cpp 6.9 s against 5.6 s), and a
# crash report still names file and line. The whole fuzz step of scripts/test.sh took 324 s of CPU
# time so, fresh build dir, no ccache (423 s before).
# MLFW_CPU_SIMD_KERNELS=OFF: the parsers the targets feed never reach the x86 kernel sets, whose
# files took 64 of the build's 270 s of compile CPU time; the portable kernels serve any call.
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER="$clangxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DMLFW_WARNINGS_AS_ERRORS=ON -DMLFW_BUILD_FUZZERS=ON -DMLFW_SANITIZE=address,undefined \
  -DMLFW_CPU_SIMD_KERNELS=OFF -DMLFW_BUILD_TESTS=OFF -DMLFW_BUILD_SAMPLES=OFF -DMLFW_BUILD_BENCHMARKS=OFF -DMLFW_INSTALL=OFF \
  -DMLFW_ENABLE_CUDA=OFF -DMLFW_WITH_MPI=OFF >"$build/configure.log" || {
  cat "$build/configure.log"
  exit 1
}

if (($# > 0)); then
  targets=("$@")
else
  mapfile -t targets < <(sed -n 's/^set(MLFW_FUZZ_TARGETS \(.*\))$/\1/p' fuzz/FuzzTargets.cmake | tr ' ' '\n')
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}"

mkdir -p "$build/artifacts"
# One target per core at a time: each fuzzer is a single process, so the targets run side by
# side and every one still gets its full time on a core of its own.
run_target() {
  local target=$1 new_inputs="$build/corpus-new/$1"
  mkdir -p "$new_inputs"
  # -rss_limit_mb/-malloc_limit_mb: a blob that makes us allocate gigabytes is a bug too.
  if UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    "$build/fuzz/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -timeout=10 -artifact_prefix="$build/artifacts/$target-" \
    "$new_inputs" "fuzz/corpus/$target" >"$build/fuzz-$target.log" 2>&1; then
    echo clean >"$build/fuzz-$target.result"
  else
    echo FAILED >"$build/fuzz-$target.result"
  fi
}
parallel=$(nproc)
running=0
for target in "${targets[@]}"; do
  rm -f "$build/fuzz-$target.result"
  if ((running >= parallel)); then
    wait -n
    running=$((running - 1))
  fi
  run_target "$target" &
  running=$((running + 1))
done
wait

status=0
total_runs=0
for target in "${targets[@]}"; do
  new_inputs="$build/corpus-new/$target"
  log="$build/fuzz-$target.log"
  result=$(cat "$build/fuzz-$target.result" 2>/dev/null || echo FAILED)
  if [[ $result != clean ]]; then
    status=1
    tail -n 60 "$log"
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)
  corpus=$(find "fuzz/corpus/$target" "$new_inputs" -type f | wc -l)
  total_runs=$((total_runs + ${runs:-0}))
  echo "fuzz: $target: $result, ${runs:-0} executions in ${seconds} s, $coverage, corpus $corpus inputs"
done
echo "fuzz: ${#targets[@]} targets ($parallel at a time), $total_runs executions in total"
exit "$status"
