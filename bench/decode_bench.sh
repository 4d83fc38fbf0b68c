#!/usr/bin/env bash
# Decode speed of `megatron-app generate` (KV cache, continuous batching) against the KV-cache
# loop a PyTorch user writes (bench/decode_torch.py, torch 1.13, float32) on the same weights: a
# GPT-2 small shape (12 layers, hidden 768, 12 heads, sequence 1024, GPT-2 vocabulary, learned
# positions, tied output) trained one iteration from configs/gpt_tiny.toml, greedy, a prompt of
# the corpus' opening sentence (48 tokens) and TOKENS new tokens, batch 1 and 8 (the same prompt
# eight times; ours decoded together by the engine). Tokens/s with the prefill included, from
# generate's log and the script's clock (model loading excluded on both sides).
#   bench/decode_bench.sh MEGATRON_APP [TOKENS (128)]
set -euo pipefail
app=$1 tokens=${2:-128}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
small=(--config "$here/../configs/gpt_tiny.toml" --set model.num_layers=12
  --set model.hidden_size=768 --set model.num_attention_heads=12 --set data.seq_length=1024
  --set model.max_position_embeddings=1024 --set "data.data_cache_path=$work/cache")
"$app" "${small[@]}" --log-level warn --set training.train_iters=1 --set training.eval_iters=0 \
  --set training.micro_batch_size=1 --set training.global_batch_size=1 \
  --set training.lr_warmup_iters=0 --set "checkpoint.save=$work/ckpt" \
  --set checkpoint.save_interval=1 > /dev/null
prompt="It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. However little known the feelings or views of such a man may be"
echo "load: $(cut -d' ' -f1 /proc/loadavg), $(nproc) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS, $tokens new tokens"
ours() {  # batch
  local args=()
  for _ in $(seq "$1"); do args+=(--prompt "$prompt"); done
  "$app" generate "${small[@]}" --load "$work/ckpt" --top-k 1 --tokens-to-generate "$tokens" \
    --max-batch "$1" "${args[@]}" --output-json "$work/out.json" 2>&1 >/dev/null |
    sed -n 's/.*generated \([0-9]*\) tokens for .* in \([0-9.]*\) s (\([0-9.]*\) tokens\/s.*/\3 (\1 tokens in \2 s)/p'
}
echo "megatron-app batch 1: $(ours 1) tokens/s"
echo "megatron-app batch 8: $(ours 8) tokens/s"
prompt_len=$(/usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))[0]["prompt_tokens"]))' "$work/out.json")
echo "pytorch (prompt $prompt_len tokens): $(/usr/bin/python3 "$here/decode_torch.py" "$work/ckpt/iter_0000001.h5" "$prompt_len" "$tokens" 1 8)"
