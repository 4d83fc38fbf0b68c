#!/usr/bin/env bash
# `megatron-app serve` under load on 127.0.0.1 (bench/serve_load.py): CLIENTS concurrent clients
# send REQUESTS streamed greedy completions of TOKENS tokens, against a server with continuous
# batching (--max-batch 8) and one serving a request at a time (--max-batch 1), on a GPT trained
# from configs/gpt_tiny.toml for 20 iterations (throughput does not depend on the weights):
# requests/s, tokens/s, time to first token and latency p50/p99.
#   bench/serve_bench.sh MEGATRON_APP [CLIENTS (8)] [REQUESTS (48)] [TOKENS (64)]
set -euo pipefail
app=$1 clients=${2:-8} requests=${3:-48} tokens=${4:-64}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
model=(--config "$here/../configs/gpt_tiny.toml" --set "data.data_cache_path=$work/cache")
"$app" "${model[@]}" --log-level warn --set training.train_iters=20 --set training.eval_iters=0 \
  --set training.lr_warmup_iters=2 --set "checkpoint.save=$work/ckpt" \
  --set checkpoint.save_interval=20 > /dev/null
echo "load: $(cut -d' ' -f1 /proc/loadavg), $(nproc) cores, $clients clients, $requests requests of $tokens tokens"
for batch in 8 1; do
  "$app" serve "${model[@]}" --load "$work/ckpt" --port 0 --max-batch $batch --log-level warn \
    > "$work/serve.out" &
  server=$!
  until grep -q "^serving" "$work/serve.out" 2>/dev/null; do sleep 0.1; done
  url=$(sed -n 's/^serving //p' "$work/serve.out")
  /usr/bin/python3 "$here/serve_load.py" "$url" 1 2 8 > /dev/null  # warm-up
  echo "max-batch $batch: $(/usr/bin/python3 "$here/serve_load.py" "$url" "$clients" "$requests" "$tokens")"
  kill -TERM $server
  wait $server
done
