#!/usr/bin/env bash
# Retro's costs on the bundled corpus: embedding throughput (chunks/s) of `retro embed`, query
# throughput (chunk queries/s) of `retro query`, and a Retro training step against a GPT of the
# same decoder (what the chunked cross-attention and the retrieval encoder cost).
#   bench/retro_bench.sh MEGATRON_APP [ROUNDS (default 2)]
# Every round: `retro embed` of the whole chunk database (13,673 chunks of the Austen corpus'
# train documents, bert_tiny: 4 layers, hidden 128, at retro_bert_max_chunk_length 128, batches
# of 128) and `retro query` of the chunks of 2,400 train + 160 valid + 40 test samples (5,200
# chunks: each embedded with the same BERT, then searched in IVF64,Flat at nprobe 8, 50 found, the
# sample's documents removed), timed by the wall clock of the command (start-up, reading the
# database and writing the blocks included); then configs/retro_tiny.toml (6 layers, hidden 128,
# 4 heads, sequence 128, micro batch = global batch 8; chunked cross-attention in layer 6 to 2
# neighbours of 128 tokens through a 2-layer encoder) and configs/gpt_tiny.toml with 6 layers,
# alternated, each the mean metrics-file elapsed_ms of 10 iterations after a warm-up one.
# The BERT is bert_tiny after 2 iterations (throughput does not depend on its weights).
set -euo pipefail
app=$1 rounds=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
configs=$here/../configs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
load() { cut -d' ' -f1 /proc/loadavg; }
seconds() { /usr/bin/python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$@"; }

"$app" --config "$configs/bert_tiny.toml" --log-level warn --set training.train_iters=2 \
  --set "checkpoint.save=$work/bert" --set checkpoint.save_interval=2 --set training.eval_iters=0 \
  --set training.lr_warmup_fraction=0 --set "data.data_cache_path=$work/bert_cache" > /dev/null
retro=(--config "$configs/retro_tiny.toml" --log-level warn --set "data.retro_bert_load=$work/bert"
  --set "data.data_cache_path=$work/cache")
"$app" retro build-db "${retro[@]}" --set "data.retro_workdir=$work/wd"
chunks=$(/usr/bin/python3 -c "import h5py, sys; print(h5py.File(sys.argv[1])['chunks'].shape[0])" \
  "$work/wd/db/chunks.h5")
queries=$(( (2400 + 160 + 40) * 2 ))
step=(--set training.train_iters=11 --set training.lr_warmup_iters=0 --set training.eval_iters=0
  --set training.micro_batch_size=8 --set logging.log_interval=1 --set checkpoint.save=
  --set "logging.metrics_file=$work/m.jsonl" --set "data.data_cache_path=$work/cache")

for round in $(seq "$rounds"); do
  rm -rf "$work/wd/embed" "$work/wd/index" "$work/wd/query"
  t0=$(date +%s.%N)
  "$app" retro embed "${retro[@]}" --set "data.retro_workdir=$work/wd"
  t1=$(date +%s.%N)
  "$app" retro index "${retro[@]}" --set "data.retro_workdir=$work/wd"
  t2=$(date +%s.%N)
  "$app" retro query "${retro[@]}" --set "data.retro_workdir=$work/wd"
  t3=$(date +%s.%N)
  e=$(seconds "$t0" "$t1") q=$(seconds "$t2" "$t3")
  echo "round $round [load $(load)] embed: $chunks chunks in $e s = $(/usr/bin/python3 -c \
    "print(round($chunks / $e))") chunks/s; query: $queries chunks in $q s = $(/usr/bin/python3 -c \
    "print(round($queries / $q))") queries/s"
  "$app" "${retro[@]}" --set "data.retro_workdir=$work/wd" --set data.retro_verify_neighbor_count=false \
    "${step[@]}" > /dev/null
  r=$(/usr/bin/python3 "$here/step_times.py" "$work/m.jsonl" $((8 * 128)))
  rm -f "$work/m.jsonl"
  "$app" --config "$configs/gpt_tiny.toml" --log-level warn --set model.num_layers=6 "${step[@]}" \
    > /dev/null
  g=$(/usr/bin/python3 "$here/step_times.py" "$work/m.jsonl" $((8 * 128)))
  rm -f "$work/m.jsonl"
  echo "round $round [load $(load)] Retro step: $r; GPT (same decoder) step: $g"
done
