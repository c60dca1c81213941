#!/usr/bin/env bash
# Static checks on the project's own sources: clang-format and clang-tidy.
#
#   scripts/lint.sh [--fix] [--format-only | --tidy-only] [--with-tests] [BUILD_DIR]
#
# BUILD_DIR (default: build) must hold compile_commands.json (configure with
# -DCMAKE_EXPORT_COMPILE_COMMANDS=ON; scripts/test.sh does). Exits non-zero on
# any finding, so CI fails. --fix rewrites the files with clang-format instead
# of only reporting them; clang-tidy findings are always reported, never
# auto-applied, because its naming fixes cross files and need a human look.
# clang-tidy checks the library, samples, benchmarks and fuzzers; --with-tests adds the test
# files (tests/.clang-tidy's checks), which CI leaves out (see below); it needs a BUILD_DIR
# configured without MLFW_UNITY_TESTS (CI's builds have it on).
# Configuration lives in .clang-format and .clang-tidy at the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

fix=0
run_format=1
run_tidy=1
with_tests=0
build=build
for arg in "$@"; do
  case "$arg" in
    --fix) fix=1 ;;
    --format-only) run_tidy=0 ;;
    --tidy-only) run_format=0 ;;
    --with-tests) with_tests=1 ;;
    -h | --help)
      sed -n '2,14p' "$0"
      exit 0
      ;;
    -*)
      echo "lint: unknown option $arg" >&2
      exit 2
      ;;
    *) build=$arg ;;
  esac
done

clang_format=$(command -v clang-format-14 || command -v clang-format)
clang_tidy=$(command -v clang-tidy-14 || command -v clang-tidy)
jobs=$(nproc)
status=0

# Our sources only: third-party and generated code are never checked.
source_dirs=(include src tests samples benchmarks fuzz)
mapfile -t sources < <(git ls-files -- "${source_dirs[@]}" | grep -E '\.(cpp|hpp|cu|cuh)$' || true)

if ((run_format)); then
  if ((fix)); then
    printf '%s\0' "${sources[@]}" | xargs -0 -r "$clang_format" -i
    echo "lint: clang-format rewrote ${#sources[@]} files in place (review with git diff)"
  else
    # One clang-format per file (its exit status says whether that file differs), on every core.
    mapfile -t unformatted < <(printf '%s\0' "${sources[@]}" |
      xargs -0 -r -P "$jobs" -n 32 sh -c 'for f; do "$0" --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"; done' \
        "$clang_format" | sort)
    if ((${#unformatted[@]})); then
      echo "lint: clang-format: ${#unformatted[@]} of ${#sources[@]} files differ from .clang-format:"
      for file in "${unformatted[@]}"; do
        echo "  $file ($("$clang_format" "$file" | diff "$file" - | grep -c '^<' || true) lines)"
      done
      echo "lint: run scripts/lint.sh --fix --format-only to rewrite them"
      status=1
    else
      echo "lint: clang-format: ${#sources[@]} files clean"
    fi
  fi
fi

if ((run_tidy)); then
  database=$build/compile_commands.json
  if [[ ! -f $database ]]; then
    echo "lint: $database is missing; configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON" >&2
    exit 2
  fi
  # A unity build's compile database names its batches (unity_*.cxx in the build dir), not the test
  # files, which clang-tidy would then silently skip: the test files need a per-file build.
  if ((with_tests)) && grep -q '^MLFW_UNITY_TESTS:BOOL=ON$' "$build/CMakeCache.txt" 2>/dev/null; then
    echo "lint: --with-tests needs a build configured without MLFW_UNITY_TESTS ($build has it ON: its" \
      "compile database lists unity batches, not the test files); e.g. cmake -S . -B build-lint" \
      "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON, then scripts/lint.sh --with-tests build-lint" >&2
    exit 2
  fi
  # Translation units of our C++ sources, each once (a private .cpp compiled
  # into a test too appears twice). CUDA files are left out: clang-tidy cannot
  # take nvcc's command lines; their host-side headers are checked through the
  # C++ files that include them.
  mapfile -t units < <(grep -o '"file": *"[^"]*"' "$database" | sed 's/.*"\([^"]*\)"$/\1/' |
    grep -E "^$root/($(
      IFS='|'
      echo "${source_dirs[*]}"
    ))/.*\.cpp$" | sort -u |
    # libtorch 1.13's headers do not compile with clang-tidy's clang (c10::IValue is incomplete
    # where libstdc++ 12 needs it), and parsing them takes minutes: the sample is left to GCC.
    grep -v "^$root/samples/libtorch_interop/")
  # The test files' units are checked only with --with-tests. They are most of clang-tidy's time
  # (about 85% of the step's 1,966 s of CPU on 2 cores, where CI's 30 minutes hold every step),
  # and what they would find is in code every test run compiles twice with -Werror (GCC in the
  # release step, clang in the sanitizer step) and runs under ASan and UBSan. Run
  # `scripts/lint.sh --tidy-only --with-tests` after changing tests.
  if ((!with_tests)); then
    mapfile -t units < <(printf '%s\n' "${units[@]}" | grep -v "^$root/tests/")
  fi
  # The test files (tests/.clang-tidy) are checked without performance-* and modernize-*: only
  # bugprone-* and readability-identifier-naming. Tests are most of the units (112 of 264) and of
  # clang-tidy's time, and those two groups guard the library's speed and the style of its code,
  # not the tests' correctness; the library sources (src/, include/), samples, benchmarks and
  # fuzzers keep every check. A test unit takes about 20% less CPU time so (9 of the 112 test
  # units, every twelfth, with clang-tidy 14: 90.8 s against 72.1 s; about 4 minutes of CPU time
  # over all of them).
  header_filter="^$root/($(
    IFS='|'
    echo "${source_dirs[*]}"
  ))/"
  # The library, samples, benchmarks and fuzzers are checked in unity batches (scripts/lint-batches.py
  # says how and why: a batch of ten library files takes a sixth of the time of its files one by
  # one); the test files, which clash on file-local names, one by one. A batch that does not
  # compile as one unit (two of its files define the same file-local name), or that draws any
  # compiler diagnostic, is checked again file by file. A batch may see more than its files alone
  # (bugprone-exception-escape follows calls into a body defined in another file of the batch).
  # bugprone-suspicious-include is off for the batches: their #include of .cpp files is the point.
  mapfile -t test_units < <(printf '%s\n' "${units[@]}" | grep "^$root/tests/" || true)
  mapfile -t other_units < <(printf '%s\n' "${units[@]}" | grep -v "^$root/tests/" || true)
  mapfile -t checks < <(python3 "$root/scripts/lint-batches.py" "$build" 8 "${other_units[@]}")
  checks+=("${test_units[@]}")
  tidy_unit() {
    local file=$1 output status=0
    if [[ $file == "$unity_dir"/* ]]; then
      output=$("$clang_tidy" -p "$unity_dir" --quiet --header-filter="$header_filter" \
        --checks=-bugprone-suspicious-include --extra-arg=-Wno-unknown-warning-option "$file" 2>&1) || status=$?
      if grep -q '\[clang-diagnostic-' <<<"$output"; then
        echo "lint: ${file#"$root"/} is checked file by file: it draws compiler diagnostics as one unit"
        status=0
        for member in $(sed -n 's|^// unit: ||p' "$file"); do
          tidy_unit "$member" || status=$?
        done
        return "$status"
      fi
      printf '%s\n' "$output"
      return "$status"
    fi
    "$clang_tidy" -p "$build" --quiet --header-filter="$header_filter" --extra-arg=-Wno-unknown-warning-option "$file"
  }
  export -f tidy_unit
  export clang_tidy build header_filter root
  unity_dir=$(cd "$build" && pwd)/lint-unity
  export unity_dir
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  start=$SECONDS
  tidy_status=0
  printf '%s\0' "${checks[@]}" |
    xargs -0 -r -P "$jobs" -n 1 bash -c 'tidy_unit "$1"' tidy_unit >"$log" 2>&1 || tidy_status=$?
  grep '^lint: ' "$log" || true
  # Each header's findings print once per unit including it: report them once.
  findings=$(grep -E '^/[^:]+:[0-9]+:[0-9]+: (warning|error):' "$log" | sort -u || true)
  count=$(printf '%s' "$findings" | grep -c . || true)
  if ((tidy_status != 0 || count != 0)); then
    echo "lint: clang-tidy: $count findings in ${#units[@]} translation units ($((SECONDS - start)) s):"
    if ((count)); then
      printf '%s\n' "$findings" | sed "s|^$root/||"
    else
      grep -vE '^[0-9]+ warnings? generated|^Suppressed|^Use -header-filter|^$' "$log" | head -50
    fi
    status=1
  else
    echo "lint: clang-tidy: ${#units[@]} translation units clean, in ${#checks[@]} runs ($((SECONDS - start)) s)"
  fi
fi

# Layering: a lower layer includes nothing from a higher one. core includes only core (and the
# top-level export.hpp / config.hpp); the backends nothing of amp, optimizers or distributed;
# distributed nothing of distributed/fsdp. Each rule: layer directory, then the include paths
# its files may not name (an extended regular expression after "mlframework/").
layering_rules=(
  "core|[a-z_]+/"
  "backends|(amp|optimizers|distributed)/"
  "distributed|distributed/fsdp/"
)
upward=()
for rule in "${layering_rules[@]}"; do
  layer=${rule%%|*}
  forbidden=${rule#*|}
  while IFS= read -r line; do
    [[ -n $line ]] && upward+=("$line")
  done < <(git ls-files -- "src/mlframework/$layer" "include/mlframework/$layer" |
    grep -E '\.(cpp|hpp|cu|cuh)$' |
    # distributed/fsdp is the layer above distributed: its own files are not distributed's.
    { if [[ $layer == distributed ]]; then grep -v '/distributed/fsdp/'; else cat; fi; } |
    xargs -r grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]mlframework/$forbidden" |
    { if [[ $layer == core ]]; then grep -vE '[<"]mlframework/core/'; else cat; fi; } || true)
done
if ((${#upward[@]})); then
  echo "lint: ${#upward[@]} includes reach up a layer (core < backends < distributed < distributed/fsdp):"
  printf '  %s\n' "${upward[@]}"
  status=1
else
  echo "lint: layering: no include reaches up a layer"
fi

# The per-instruction-set kernel files are compiled with -mavx2 / -mavx512*: an inline function
# they emit out of line (a weak symbol) could be the one copy the linker keeps for the whole
# library, and then run AVX-512 code on a CPU without it. Their helpers therefore have internal
# linkage; this check keeps it so (the C++ personality reference is the one weak symbol allowed).
if ((run_tidy)); then
  mapfile -t isa_objects < <(find "$build/src" -path '*mlframework.dir*' -name '*Avx*.o' 2>/dev/null | sort)
  if ((${#isa_objects[@]} == 0)); then
    echo "lint: no per-instruction-set objects under $build/src (build the library first)" >&2
    status=1
  else
    shared=$(for object in "${isa_objects[@]}"; do
      nm -C --defined-only "$object" | awk -v o="${object##*/}" '$2 ~ /^[WVu]$/ && $3 !~ /^DW\.ref\./ {
        $1 = ""; $2 = ""; print o ":" $0 }'
    done)
    if [[ -n $shared ]]; then
      echo "lint: per-instruction-set objects define weak symbols (give them internal linkage):"
      printf '%s\n' "$shared" | head -40
      status=1
    else
      echo "lint: ${#isa_objects[@]} per-instruction-set objects define no weak symbols"
    fi
  fi
fi

exit "$status"
