#!/usr/bin/env bash
# [ddp] keys that do not fit together are refused at config time, naming the key and the reason.
#   config_refusal_test.sh MEGATRON_APP
set -uo pipefail
app=$1
config="$(cd "$(dirname "$0")" && pwd)/../training/tiny_gpt.toml"
expect() {  # expect TEXT ARGS...: exit code 2 and TEXT in the message
  local text=$1
  shift
  local out
  out=$("$app" --config "$config" --print-config "$@" 2>&1)
  local rc=$?
  [ "$rc" = 2 ] || { echo "exit $rc for $*: $out"; exit 1; }
  grep -qF "$text" <<< "$out" || { echo "no '$text' in: $out"; exit 1; }
}
expect "overlap_param_gather overlaps the distributed optimizer's parameter all-gather and needs use_distributed_optimizer = true" \
  --set ddp.overlap_param_gather=true
expect "ddp_bucket_size applies only with overlap_grad_reduce = true" --set ddp.ddp_bucket_size=1000
expect "ddp.ddp_bucket_size" --set ddp.overlap_grad_reduce=true --set ddp.ddp_bucket_size=0
"$app" --config "$config" --print-config --set ddp.use_distributed_optimizer=true \
  --set ddp.overlap_param_gather=true --set ddp.overlap_grad_reduce=true \
  --set ddp.ddp_bucket_size=4096 | grep -q "ddp_bucket_size = 4096"
echo "ddp config refusals ok"
