#!/usr/bin/env bash
# End-to-end tensor parallelism: the tiny GPT trained for 20 iterations (dropout off, gradient
# clipping at 1.0 active) at TP2 on 2 ranks, and at TP2 with sequence parallelism, gives every
# iteration's lm loss and grad norm (and the eval losses) equal to the 1-rank run within 1e-5
# relative.
#   tp_training_test.sh MEGATRON_APP WORK_DIR MPIEXEC [MPIRUN FLAGS...]
# Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP: 50257 tokens
# pad to 50304 at TP1 with 128, and to the same 50304 at TP2 only with 64 (128 would give 50432,
# i.e. 128 extra softmax rows and a different loss), so the TP2 runs set 64.
set -euo pipefail
app=$1 work=$2 mpiexec=$3
mpi_flags=("${@:4}")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
common=(--config "$here/../training/tiny_gpt.toml" --log-level warn
  --set model.hidden_dropout=0.0 --set model.attention_dropout=0.0
  --set training.train_iters=20 --set training.eval_interval=10)

"$app" "${common[@]}" --set "data.data_cache_path=$work/cache1" \
  --set "logging.metrics_file=$work/tp1.jsonl" > /dev/null
"$mpiexec" "${mpi_flags[@]}" -np 2 "$app" "${common[@]}" --set "data.data_cache_path=$work/cache2" \
  --set parallel.tensor_model_parallel_size=2 --set model.make_vocab_size_divisible_by=64 \
  --set "logging.metrics_file=$work/tp2.jsonl" > /dev/null
"$mpiexec" "${mpi_flags[@]}" -np 2 "$app" "${common[@]}" --set "data.data_cache_path=$work/cache3" \
  --set parallel.tensor_model_parallel_size=2 --set parallel.sequence_parallel=true \
  --set model.make_vocab_size_divisible_by=64 \
  --set "logging.metrics_file=$work/tp2sp.jsonl" > /dev/null

/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def losses(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
    out = {(r["record"], r["iteration"]): r["lm loss"] for r in rows if "lm loss" in r}
    out.update({("grad norm", r["iteration"]): r["grad_norm"] for r in rows if "grad_norm" in r})
    return out
ref = losses("tp1")
assert sum(1 for k in ref if k[0] == "train") == 20, sorted(ref)
assert sum(1 for k in ref if k[0] == "grad norm") == 20, sorted(ref)
for name in ("tp2", "tp2sp"):
    got = losses(name)
    assert sorted(got) == sorted(ref), (name, sorted(got))
    worst = max(abs(got[k] - ref[k]) / abs(ref[k]) for k in ref)
    for k in sorted(ref):
        assert abs(got[k] - ref[k]) <= 1e-5 * abs(ref[k]), f"{name} {k}: {got[k]!r} vs TP1 {ref[k]!r}"
    print(f"{name}: {len(ref)} losses and grad norms equal to TP1 within {worst:.2e} relative "
          f"(train {ref[('train', 1)]:.5f} -> {ref[('train', 20)]:.5f})")
PY
