#!/usr/bin/env bash
# `megatron-app serve` on the tasks' GPT checkpoint, driven by clients no one here wrote: curl,
# Python's requests (requests_client.py), the OpenAI client library from npm (openai_client.mjs)
# and headless Chromium on the page at / (page_test.py); the answers are compared with
# `megatron-app generate`'s greedy text, itself checked against PyTorch (tests/inference). Last,
# SIGTERM stops the server with exit 0.
#   serve_test.sh MEGATRON_APP WORK_DIR TASKS_GPT_CHECKPOINT_DIR
set -euo pipefail
app=$1 work=$2 tasks_dir=$3
ckpt=$(printf '%s/iter_%07d.h5' "$tasks_dir" "$(cat "$tasks_dir/latest_checkpointed_iteration.txt")")
here=$(cd "$(dirname "$0")" && pwd)
configs=$here/../../configs
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
fail() { echo "FAIL: $*" >&2; exit 1; }
model=(--config "$configs/gpt_tiny.toml" --load "$ckpt" --set "data.data_cache_path=$work/cache")

# The reference: generate's greedy continuations.
"$app" generate "${model[@]}" --log-level warn --top-k 1 --tokens-to-generate 24 \
  --prompt "It is a truth universally acknowledged" --prompt "Mr. Darcy said" \
  --output-json "$work/generated.json" > /dev/null

"$app" serve "${model[@]}" --port 0 --max-batch 4 > "$work/serve.out" 2> "$work/serve.log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  grep -q "^serving http://" "$work/serve.out" 2>/dev/null && break
  kill -0 $server 2>/dev/null || fail "the server did not start: $(cat "$work/serve.log")"
  sleep 0.1
done
url=$(sed -n 's/^serving //p' "$work/serve.out")
[ -n "$url" ] || fail "no 'serving' line"

# curl: health, the model list, Megatron's /api, a stream, a refusal.
curl -sf "$url/health" | grep -q '"status":"ok"' || fail "/health"
curl -sf "$url/v1/models" | grep -q '"id":"gpt_tiny"' || fail "/v1/models"
curl -sf "$url/" | grep -q "<title>megatron-app</title>" || fail "the page at /"
want=$(/usr/bin/python3 -c 'import json,sys; g=json.load(open(sys.argv[1]))[0]; print(json.dumps(g["prompt"]+g["text"]))' "$work/generated.json")
got=$(curl -sf -X PUT "$url/api" -H 'Content-Type: application/json' \
  -d '{"prompts": ["It is a truth universally acknowledged"], "tokens_to_generate": 24, "top_k": 1}' |
  /usr/bin/python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["text"][0]))')
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
mkdir -p "$work/node"
cp "$here/package.json" "$work/node/"
(cd "$work/node" && npm install --no-audit --no-fund --loglevel error > npm.log 2>&1) ||
  fail "npm install openai: $(cat "$work/node/npm.log")"
cp "$here/openai_client.mjs" "$work/node/"
node "$work/node/openai_client.mjs" "$url" "$work/generated.json"

/usr/bin/python3 "$here/page_test.py" --url "$url"

kill -TERM $server
code=0
wait $server || code=$?
trap - EXIT
[ "$code" = 0 ] || fail "after SIGTERM the server exited $code"
grep -q "SIGTERM: stopping the server" "$work/serve.log" && grep -q "server stopped" "$work/serve.log" ||
  fail "no clean stop in the log: $(tail -3 "$work/serve.log")"
echo "ok   SIGTERM stopped the server cleanly"
echo "serve: curl, requests, the openai client and the page agree with generate"
