#!/usr/bin/env bash
# `megatron-app serve` on the tasks' GPT checkpoint, driven by clients no one here wrote: curl,
# Python's requests (requests_client.py), the OpenAI client library from npm (openai_client.mjs)
# and headless Chromium on the page at / (page_test.py); the answers are compared with
# `megatron-app generate`'s greedy text, itself checked against PyTorch (tests/inference). Last,
# SIGTERM stops the server with exit 0. Then a server on four ranks (TP2 x PP2: rank 0 serves,
# the others follow its decoding) answers /api as generate does, and stops on SIGTERM to rank 0
# with mpirun's exit 0.
#   serve_test.sh MEGATRON_APP WORK_DIR TASKS_GPT_CHECKPOINT_DIR MPIEXEC
set -euo pipefail
app=$1 work=$2 tasks_dir=$3 mpiexec=$4
ckpt=$(printf '%s/iter_%07d.h5' "$tasks_dir" "$(cat "$tasks_dir/latest_checkpointed_iteration.txt")")
here=$(cd "$(dirname "$0")" && pwd)
configs=$here/../../configs
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
fail() { echo "FAIL: $*" >&2; exit 1; }
wait_for_url() {  # serve.out pid
  for _ in $(seq 600); do
    grep -q "^serving http://" "$1" 2>/dev/null && break
    kill -0 "$2" 2>/dev/null || fail "the server did not start: $(cat "$work"/serve*.log)"
    sleep 0.1
  done
  sed -n 's/^serving //p' "$1"
}
# The greedy /api text of the first generated prompt, as JSON.
api_text() {
  curl -sf -X PUT "$1/api" -H 'Content-Type: application/json' \
    -d '{"prompts": ["It is a truth universally acknowledged"], "tokens_to_generate": 24, "top_k": 1}' |
    /usr/bin/python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["text"][0]))'
}
model=(--config "$configs/gpt_tiny.toml" --load "$ckpt" --set "data.data_cache_path=$work/cache")

# The reference: generate's greedy continuations.
"$app" generate "${model[@]}" --log-level warn --top-k 1 --tokens-to-generate 24 \
  --prompt "It is a truth universally acknowledged" --prompt "Mr. Darcy said" \
  --output-json "$work/generated.json" > /dev/null

"$app" serve "${model[@]}" --port 0 --max-batch 4 > "$work/serve.out" 2> "$work/serve.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
url=$(wait_for_url "$work/serve.out" $server)
[ -n "$url" ] || fail "no 'serving' line"

# curl: health, the model list, Megatron's /api, a stream, a refusal.
curl -sf "$url/health" | grep -q '"status":"ok"' || fail "/health"
curl -sf "$url/v1/models" | grep -q '"id":"gpt_tiny"' || fail "/v1/models"
curl -sf "$url/" | grep -q "<title>megatron-app</title>" || fail "the page at /"
want=$(/usr/bin/python3 -c 'import json,sys; g=json.load(open(sys.argv[1]))[0]; print(json.dumps(g["prompt"]+g["text"]))' "$work/generated.json")
got=$(api_text "$url")
[ "$got" = "$want" ] || fail "curl /api: $got, generate gave $want"
curl -sfN "$url/v1/completions" -d '{"prompt": "Mr. Darcy", "max_tokens": 5, "stream": true}' \
  > "$work/stream.txt"
[ "$(grep -c '^data: {' "$work/stream.txt")" -ge 2 ] && tail -2 "$work/stream.txt" | grep -q '^data: \[DONE\]' ||
  fail "curl stream: $(cat "$work/stream.txt")"
code=$(curl -s -o "$work/refused.json" -w '%{http_code}' -X PUT "$url/api" -d '{"prompts": ["a"], "top_k": 2, "top_p": 0.5}')
[ "$code" = 400 ] && grep -q "cannot set both top-k and top-p samplings." "$work/refused.json" ||
  fail "curl refusal: $code $(cat "$work/refused.json")"
echo "ok   curl: health, models, page, /api equals generate, a stream, a 400"

/usr/bin/python3 "$here/requests_client.py" --url "$url" --generated "$work/generated.json" \
  --server-log "$work/serve.log"

# The OpenAI client from the npm registry, installed into the work folder (its version pinned).
# Node.js trusts its own CA list; the system's (which holds any registry proxy's CA) is given to
# npm too. Without a way to the registry the client's checks are skipped, and say so.
mkdir -p "$work/node"
cp "$here/package.json" "$work/node/"
npm_ca=()
[ -f /etc/ssl/certs/ca-certificates.crt ] && npm_ca=(--cafile /etc/ssl/certs/ca-certificates.crt)
if (cd "$work/node" && npm install "${npm_ca[@]}" --no-audit --no-fund --loglevel error \
      > npm.log 2>&1); then
  cp "$here/openai_client.mjs" "$work/node/"
  node "$work/node/openai_client.mjs" "$url" "$work/generated.json"
elif grep -qE "ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|CERT|certificate" "$work/node/npm.log"; then
  echo "SKIP openai client: the npm registry cannot be reached from here ($(grep -m1 -oE "(ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|SELF_SIGNED_CERT_IN_CHAIN|[A-Z_]*CERT[A-Z_]*)" "$work/node/npm.log"))"
else
  fail "npm install openai: $(cat "$work/node/npm.log")"
fi

/usr/bin/python3 "$here/page_test.py" --url "$url"

kill -TERM $server
code=0
wait $server || code=$?
trap - EXIT
[ "$code" = 0 ] || fail "after SIGTERM the server exited $code"
grep -q "SIGTERM: stopping the server" "$work/serve.log" && grep -q "server stopped" "$work/serve.log" ||
  fail "no clean stop in the log: $(tail -3 "$work/serve.log")"
echo "ok   SIGTERM stopped the server cleanly"

# Four ranks, tensor x pipeline parallelism (the padded vocabulary kept by
# make_vocab_size_divisible_by 64 x 2).
ASAN_OPTIONS=detect_leaks=0 "$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -np 4 \
  "$app" serve "${model[@]}" --port 0 --set parallel.tensor_model_parallel_size=2 \
  --set parallel.pipeline_model_parallel_size=2 --set model.make_vocab_size_divisible_by=64 \
  > "$work/serve_tp2.out" 2> "$work/serve_tp2.log" &
launcher=$!
trap 'kill $launcher 2>/dev/null || true' EXIT
url=$(wait_for_url "$work/serve_tp2.out" $launcher)
got=$(api_text "$url")
[ "$got" = "$want" ] || fail "TP2 x PP2 /api: $got, generate gave $want"
rank0=$(pgrep -f "megatron-app serve" | while read -r p; do
  if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=0"; then
    echo "$p"
  fi
done)
[ -n "$rank0" ] || fail "no rank 0 process"
kill -TERM $rank0
code=0
wait $launcher || code=$?
trap - EXIT
[ "$code" = 0 ] || fail "after SIGTERM to rank 0, mpirun exited $code: $(tail -3 "$work/serve_tp2.log")"
echo "ok   four ranks (TP2 x PP2) answer /api as generate; SIGTERM to rank 0 ends the job with 0"
echo "serve: curl, requests, the openai client and the page agree with generate"
