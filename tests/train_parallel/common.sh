# Sourced by the train_parallel scripts with MEGATRON_APP MPIEXEC WORK_DIR first: defines
# `train NP NAME ARGS...`, which trains the tiny GPT or BERT (dropout off, micro batch 1, global batch 8,
# 20 iterations, one thread per rank) on NP ranks (1: a plain process without MPI), its metrics in
# WORK_DIR/NAME.jsonl, `compare` (compare.py), `matches` and `first_ten`.
set -euo pipefail
app=$1 mpiexec=$2 work=$3
shift 3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work" && mkdir -p "$work"
# TRAIN_PARALLEL_CONFIG: another tiny model's config (the BERT layouts use tiny_bert.toml).
tiny=(--config "${TRAIN_PARALLEL_CONFIG:-$here/../training/tiny_gpt.toml}" --log-level warn
      --set model.hidden_dropout=0 --set model.attention_dropout=0
      --set training.micro_batch_size=1 --set training.global_batch_size=8
      --set training.train_iters=20 --set training.eval_iters=0 --set runtime.threads=1
      --set "data.data_cache_path=$work/cache")
train() {
  local np=$1 name=$2
  shift 2
  rm -f "$work/$name.jsonl"
  local cmd=("$app" "${tiny[@]}" --set "logging.metrics_file=$work/$name.jsonl" "$@")
  if [ "$np" = 1 ]; then
    "${cmd[@]}" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; return 1; }
  else
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive "$mpiexec" --oversubscribe --allow-run-as-root \
      --bind-to none -np "$np" "${cmd[@]}" > "$work/$name.log" 2>&1 \
      || { cat "$work/$name.log"; return 1; }
  fi
}
compare() { /usr/bin/python3 "$here/compare.py" "$@"; }
# matches REFERENCE_DIR NAME SAVE_DIR FIRST LAST: run NAME's losses of iterations FIRST..LAST equal
# the one-rank run's (REFERENCE_DIR/baseline.jsonl), and its checkpoint of iteration LAST in
# SAVE_DIR equals the one-rank checkpoint (REFERENCE_DIR/ckpt).
matches() {
  local reference=$1 name=$2 save=$3 first=$4 last=$5
  local file
  file=$(printf 'iter_%07d.h5' "$last")
  compare losses "$reference/baseline.jsonl" "$work/$name.jsonl" "$first" "$last"
  compare weights "$reference/ckpt/$file" "$save/$file"
}
# first_ten REFERENCE_DIR NP NAME SAVE_DIR ARGS...: trains NAME on NP ranks until iteration 10,
# saving there to SAVE_DIR, and checks it against the one-rank run up to that point.
first_ten() {
  local reference=$1 np=$2 name=$3 save=$4
  shift 4
  train "$np" "$name" --set "checkpoint.save=$save" --set training.exit_interval=10 "$@"
  test "$(cat "$save/latest_checkpointed_iteration.txt")" = 10
  matches "$reference" "$name" "$save" 1 10
}
