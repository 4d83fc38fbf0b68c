#!/usr/bin/env bash
# Context parallelism on this machine: step time and peak memory of a long-sequence GPT on one
# rank (2 threads) and with its sequences split over 2 ranks (CP2, 1 thread each).
#   bench/gpt_context_parallel_bench.sh MEGATRON_APP [ITERATIONS [LAYERS HIDDEN HEADS SEQ]]
# Default shape: L4 h256, 4 heads, 8192-token sequences, micro and global batch 1, fp32, dropout
# off. Each run: ITERATIONS timed iterations after one warm-up (mean "elapsed time per
# iteration"); peak memory is each rank's maximum resident set (getrusage of the rank's process).
set -euo pipefail
app=$1 iterations=${2:-2}
layers=${3:-4} hidden=${4:-256} heads=${5:-4} seq=${6:-8192}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# Runs its arguments and writes the child's peak resident set (MiB) to WORK/rss.RANK.
cat > "$work/peak.py" <<'PY'
import os, resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
with open(f"{sys.argv[1]}/rss.{rank}", "w") as f:
    f.write(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f}\n")
sys.exit(code)
PY

run() {  # run NAME RANKS THREADS [--set ...]: prints "ms/iteration peak-MiB-per-rank"
  local name=$1 ranks=$2 threads=$3
  shift 3
  local launch=()
  if [ "$ranks" -gt 1 ]; then
    launch=(mpirun --oversubscribe -np "$ranks" -x OMP_NUM_THREADS -x OMP_WAIT_POLICY)
    [ "$(id -u)" = 0 ] && launch+=(--allow-run-as-root)  # containers run as root
  fi
  rm -f "$work"/rss.*
  OMP_NUM_THREADS=$threads "${launch[@]}" /usr/bin/python3 "$work/peak.py" "$work" "$app" \
    --config "$here/../configs/gpt_tiny.toml" --log-level warn \
    --set "model.num_layers=$layers" --set "model.hidden_size=$hidden" \
    --set "model.num_attention_heads=$heads" --set "model.max_position_embeddings=$seq" \
    --set model.hidden_dropout=0.0 --set model.attention_dropout=0.0 \
    --set model.make_vocab_size_divisible_by=64 \
    --set "data.seq_length=$seq" --set "data.data_cache_path=$work/cache" \
    --set training.micro_batch_size=1 --set training.global_batch_size=1 \
    --set "training.train_iters=$((iterations + 1))" --set training.lr_warmup_iters=0 \
    --set training.eval_iters=0 --set logging.log_interval=1 --set checkpoint.save= \
    --set "runtime.threads=$threads" --set "logging.metrics_file=$work/$name.jsonl" "$@" > /dev/null
  /usr/bin/python3 -c "
import glob, json
rows = [json.loads(l) for l in open('$work/$name.jsonl') if '\"train\"' in l][1:]
peaks = [int(open(p).read()) for p in glob.glob('$work/rss.*')]
print(f'{sum(r[\"elapsed_ms\"] for r in rows) / len(rows):.0f} {max(peaks)}')"
}

read -r t1 m1 < <(run cp1 1 2)
read -r t2 m2 < <(run cp2 2 1 --set parallel.context_parallel_size=2)
echo "shape: L$layers h$hidden heads $heads seq $seq, batch 1, fp32; $iterations timed iterations"
echo "CP1 (1 rank x 2 threads):  $t1 ms/iteration, peak $m1 MiB"
echo "CP2 (2 ranks x 1 thread):  $t2 ms/iteration, peak $m2 MiB per rank"
/usr/bin/python3 -c "print(f'CP2 / CP1: step time {$t2 / $t1:.2f}x, peak memory per rank {$m2 / $m1:.2f}x')"
