#!/usr/bin/env bash
# The main job from a fresh clone: installs dependencies, builds megatron-app, and trains the
# default tiny GPT (configs/gpt_tiny.toml) on the bundled corpus, printing Megatron's log lines
# with the falling loss, validation and test loss, and saving HDF5 checkpoints; then generates a
# greedy continuation of a prompt from the trained model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh main
mkdir -p build-release
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGATRON_BUILD_TESTS=OFF > build-release.configure.log 2>&1 \
  || { cat build-release.configure.log; exit 1; }
cmake --build build-release -j "$(nproc)"
app=build-release/bin/megatron-app

echo "== megatron-app plugins"
"$app" plugins
echo "== training configs/gpt_tiny.toml (checkpoints in checkpoints/gpt_tiny)"
rm -rf checkpoints/gpt_tiny
"$app" --config configs/gpt_tiny.toml
echo "== the last checkpoint"
"$app" inspect checkpoints/gpt_tiny
echo "== what it learned: a greedy continuation of a prompt (megatron-app generate)"
"$app" generate --config configs/gpt_tiny.toml --log-level warn --top-k 1 --tokens-to-generate 40 \
  --prompt "It is a truth universally acknowledged"
