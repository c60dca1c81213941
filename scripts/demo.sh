#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main demo. This is README's demo command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build=${MLFW_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j"$(nproc)" --target scale_and_unscale
"$build"/samples/scale_and_unscale/scale_and_unscale "$@"
