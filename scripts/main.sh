#!/usr/bin/env bash
# The main job from a fresh clone: installs dependencies, builds megatron-app, lists its plugins
# and checks every parallel group's collectives on 1 and 2 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
mkdir -p build-release
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGATRON_BUILD_TESTS=OFF > build-release.configure.log 2>&1 \
  || { cat build-release.configure.log; exit 1; }
cmake --build build-release -j "$(nproc)"
app=build-release/bin/megatron-app

echo "== megatron-app plugins"
"$app" plugins
echo "== collectives check, 1 rank"
"$app" --config configs/tasks/collectives.toml
echo "== collectives check, 2 ranks (mpirun)"
mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$app" --config configs/tasks/collectives.toml
