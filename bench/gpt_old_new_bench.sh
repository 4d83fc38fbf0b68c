#!/usr/bin/env bash
# GPT training-step time of two megatron-app builds (e.g. before/after a change), run alternately
# (old, new, old, new, ...) so that a changing machine load falls on both alike.
#   bench/gpt_old_new_bench.sh OLD_APP NEW_APP [ROUNDS [ITERATIONS [GPT2_SMALL_ITERATIONS [SHAPES
#     [PRECISIONS]]]]]
# Shapes: gpt_tiny (L4 h128 s128 mbs8), gpt2_small (L12 h768 s1024 mbs4); SHAPES (default
# "gpt_tiny gpt2_small") picks some, PRECISIONS (default "fp32 bf16") likewise. Each run:
# configs/gpt_tiny.toml with the shape overridden, ITERATIONS (+1 warm-up) iterations, eval off, no checkpoint; the figure is the mean metrics-file
# elapsed_ms after the warm-up iteration, as in bench/gpt_train_bench.sh.
set -euo pipefail
old=$1 new=$2 rounds=${3:-2} iterations=${4:-5} large_iterations=${5:-2}
shapes=${6:-"gpt_tiny gpt2_small"}
precisions=${7:-"fp32 bf16"}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
while read -r name layers hidden heads seq mbs; do
  [[ " $shapes " == *" $name "* ]] || continue
  n=$iterations
  [ "$name" = gpt2_small ] && n=$large_iterations
  for precision in $precisions; do
    flag=()
    [ "$precision" = bf16 ] && flag=(--set training.bf16=true)
    for round in $(seq "$rounds"); do
      for which in old new; do
        app=$old
        [ "$which" = new ] && app=$new
        start=$(date -u +%T)
        "$app" --config "$here/../configs/gpt_tiny.toml" --log-level warn \
          --set "model.num_layers=$layers" --set "model.hidden_size=$hidden" \
          --set "model.num_attention_heads=$heads" --set "model.max_position_embeddings=$seq" \
          --set "data.seq_length=$seq" --set "data.data_cache_path=$work/cache" \
          --set "training.micro_batch_size=$mbs" --set "training.global_batch_size=$mbs" \
          --set "training.train_iters=$((n + 1))" --set training.lr_warmup_iters=0 \
          --set training.eval_iters=0 --set logging.log_interval=1 --set checkpoint.save= \
          --set "logging.metrics_file=$work/m.jsonl" "${flag[@]}" > /dev/null
        /usr/bin/python3 -c "
import json
rows = [json.loads(l) for l in open('$work/m.jsonl') if '\"train\"' in l][1:]
ms = sum(r['elapsed_ms'] for r in rows) / len(rows)
print(f'$name $precision round $round $which [$start, load $(cut -d' ' -f1 /proc/loadavg)]: '
      f'{ms:.1f} ms/step, {$mbs * $seq / ms * 1000:.0f} tokens/s (per iteration: ' +
      ', '.join(f\"{r['elapsed_ms']:.0f}\" for r in rows) + ')')"
        rm -f "$work/m.jsonl"
      done
    done
  done
done <<'SHAPES'
gpt_tiny 4 128 4 128 8
gpt2_small 12 768 12 1024 4
SHAPES
