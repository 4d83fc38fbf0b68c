#!/usr/bin/env bash
# Installs megatron-app into a temporary prefix, builds the llama_tiny MODEL plugin outside the
# tree against that install only (find_package(megatron)), and trains it for a few iterations
# with the installed host — never rebuilt — which finds it through [plugins] paths.
# Usage: run_out_of_tree_model_test.sh BUILD_DIR SRC WORK SOURCE_ROOT
#   SOURCE_ROOT: megatron-app's source tree (its core headers must not be used; its data/ is).
set -euo pipefail
build_dir=$1 src=$2 work=$3 source_root=$4
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
app="$prefix/bin/megatron-app"
data="$source_root/data"

fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {  # expect FILE PATTERN
  grep -qE -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; fail "output lacks /$2/"; }
}
reject() {  # reject FILE PATTERN
  if grep -qE -- "$2" "$1"; then echo "--- $1:" >&2; cat "$1" >&2; fail "output has /$2/"; fi
}

echo "== install into $prefix"
cmake --install "$build_dir" --prefix "$prefix" > "$work/install.log"
[ -x "$app" ] || fail "no installed host"
for header in plugin.h nn/layer_stack_model.h nn/model_config.h nn/embedding.h nn/lm_loss.h \
  nn/block.h nn/core_blocks.h; do
  [ -f "$prefix/include/megatron/$header" ] || fail "installed SDK lacks megatron/$header"
done
[ -f "$prefix/lib/cmake/megatron/megatronConfig.cmake" ] || fail "no installed package config"
host_before=$(md5sum "$app" | cut -d' ' -f1)

echo "== build the model plugin out of tree, against the install only"
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$src" -B "$work/plugin-build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  > "$work/plugin-configure.log"
cmake --build "$work/plugin-build" > "$work/plugin-build.log"
expect "$work/plugin-build/CMakeCache.txt" "^megatron_DIR:PATH=$prefix/lib/cmake/megatron$"
commands="$work/plugin-build/compile_commands.json"
expect "$commands" "llama_tiny\.cpp"
expect "$commands" "$prefix/include"
reject "$commands" "$source_root/core"
if [ ${#generator[@]} -gt 0 ]; then  # the headers the compiler actually read (ninja's deps log)
  ninja -C "$work/plugin-build" -t deps > "$work/plugin-deps.txt"
  expect "$work/plugin-deps.txt" "$prefix/include/megatron/nn/layer_stack_model\.h"
  reject "$work/plugin-deps.txt" "$source_root/core"
fi
mkdir -p "$work/dropin"
cp "$work/plugin-build/libllama_tiny.so" "$work/dropin/"

cat > "$work/llama_tiny.toml" <<TOML
[plugins]
paths = ["$work/dropin"]

[model]
type = "llama_tiny"   # RMSNorm, SwiGLU, RoPE, 2 query groups, no biases, untied output
num_layers = 2
hidden_size = 64
num_attention_heads = 4

[data]
type = "gpt"
data_path = ["$data/austen_text_document"]
data_cache_path = "$work/data_cache"
split = "90,5,5"
seq_length = 32
vocab_file = "$data/encoder.json"
merge_file = "$data/vocab.bpe"

[optimizer]
type = "adam"

[training]
micro_batch_size = 4
global_batch_size = 8
train_iters = 6
lr = 3e-3
lr_decay_style = "constant"
seed = 1234
eval_interval = 100
eval_iters = 1

[logging]
log_interval = 1

[checkpoint]
save = "$work/checkpoints"
TOML

echo "== the installed host lists it, found through [plugins] paths"
"$app" plugins --config "$work/llama_tiny.toml" > "$work/plugins.out" 2>&1 \
  || { cat "$work/plugins.out"; fail "plugins exited non-zero"; }
expect "$work/plugins.out" "model +llama_tiny +0\.1\.0 +.*dropin/libllama_tiny\.so"
expect "$work/plugins.out" "model +gpt .*lib/megatron/plugins/"

echo "== its [model] schema: the shared keys with LLaMA's defaults, rotary positions only"
"$app" --config "$work/llama_tiny.toml" --print-config > "$work/config.out" 2>&1 \
  || { cat "$work/config.out"; fail "--print-config failed"; }
for line in 'normalization = "RMSNorm"' 'swiglu = true' 'position_embedding_type = "rope"' \
  'num_query_groups = 2' 'disable_bias_linear = true' 'untie_embeddings_and_output_weights = true' \
  'hidden_dropout = 0.0'; do
  expect "$work/config.out" "^$line$"
done
if "$app" --config "$work/llama_tiny.toml" --set model.position_embedding_type=learned_absolute \
  > "$work/bad.out" 2>&1; then
  fail "a learned position table was accepted"
fi
expect "$work/bad.out" "model\.position_embedding_type: \"learned_absolute\" is not one of: rope"

echo "== and trains it for 6 iterations on the bundled corpus"
"$app" --config "$work/llama_tiny.toml" > "$work/train.out" 2>&1 \
  || { cat "$work/train.out"; fail "training failed"; }
expect "$work/train.out" "llama_tiny: 2 layers, hidden 64, 4 heads \(2 query groups"
# expect_falling_loss TRAIN_OUTPUT: 6 lm loss lines, the last below the first.
expect_falling_loss() {
  local out=$1 losses="$1.losses"
  grep -E "iteration +[0-9]+/ +6 .* lm loss: " "$out" > "$losses" \
    || { cat "$out"; fail "no lm loss lines in $out"; }
  [ "$(wc -l < "$losses")" -eq 6 ] || { cat "$losses"; fail "expected 6 loss lines in $out"; }
  local first last
  first=$(sed -E 's/.* lm loss: ([0-9.eE+-]+).*/\1/' <<< "$(head -n1 "$losses")")
  last=$(sed -E 's/.* lm loss: ([0-9.eE+-]+).*/\1/' <<< "$(tail -n1 "$losses")")
  echo "lm loss: iteration 1 $first, iteration 6 $last"
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || fail "loss did not fall ($first -> $last)"
}
expect_falling_loss "$work/train.out"

echo "== its checkpoint holds LLaMA's parameters, no position table"
"$app" inspect "$work/checkpoints" > "$work/inspect.out" 2>&1 \
  || { cat "$work/inspect.out"; fail "inspect failed"; }
expect "$work/inspect.out" "decoder\.layers\.1\.mlp\.linear_fc1\.weight"
expect "$work/inspect.out" "embedding\.word_embeddings\.weight"
reject "$work/inspect.out" "position_embeddings"
reject "$work/inspect.out" "\.bias"
# GQA: linear_qkv has (np + 2 ng) hn = (4 + 2 * 2) * 16 = 128 rows (192 without groups);
# SwiGLU: linear_fc1 has 2 x ffn = 2 * 128 rows (ffn = int(8h/3/64)*64).
expect "$work/inspect.out" "model/decoder\.layers\.0\.self_attention\.linear_qkv\.weight +\[128, 64\]"
expect "$work/inspect.out" "model/decoder\.layers\.0\.mlp\.linear_fc1\.weight +\[256, 64\]"
expect "$work/inspect.out" "model/output_layer\.weight +\[50304, 64\]"
expect "$work/inspect.out" "type = \"llama_tiny\""
expect "$work/inspect.out" "normalization = \"RMSNorm\""

echo "== GPT-J's parallel layer, a block kind of the plugin's own, trains the same way"
"$app" --config "$work/llama_tiny.toml" --set model.parallel_attention_mlp=true \
  --set checkpoint.save="$work/checkpoints_parallel" > "$work/train_parallel.out" 2>&1 \
  || { cat "$work/train_parallel.out"; fail "training the parallel layers failed"; }
expect "$work/train_parallel.out" "parallel attention \+ MLP layers"
expect_falling_loss "$work/train_parallel.out"
"$app" inspect "$work/checkpoints_parallel" > "$work/inspect_parallel.out" 2>&1 \
  || { cat "$work/inspect_parallel.out"; fail "inspect failed (parallel layers)"; }
# One norm per layer in front of both: no pre_mlp_layernorm.
expect "$work/inspect_parallel.out" "model/decoder\.layers\.1\.input_layernorm\.weight +\[64\]"
expect "$work/inspect_parallel.out" "model/decoder\.layers\.1\.self_attention\.linear_qkv\.weight +\[128, 64\]"
expect "$work/inspect_parallel.out" "model/decoder\.layers\.1\.mlp\.linear_fc1\.weight +\[256, 64\]"
reject "$work/inspect_parallel.out" "pre_mlp_layernorm"

[ "$(md5sum "$app" | cut -d' ' -f1)" = "$host_before" ] || fail "host changed"
echo "PASS: out-of-tree model plugin built against the installed SDK and trained by the installed host"
