#!/usr/bin/env bash
# Configures and builds megatron-app into a build directory. Usage: build.sh BUILD_DIR [CMAKE ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=$1; shift
jobs=${MEGATRON_BUILD_JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEGATRON_WERROR=ON "$@" > "$build_dir.configure.log" 2>&1 \
  || { cat "$build_dir.configure.log"; exit 1; }
cmake --build "$build_dir" -j "$jobs"
