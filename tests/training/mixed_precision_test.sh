#!/usr/bin/env bash
# bf16 and fp16 mixed precision (fp32 master weights and gradients, GEMM inputs in 16 bits): the
# first loss matches fp32 closely, training still lowers the loss, and fp16's dynamic loss scaler
# skips the overflowing first iterations (scale 2^32) and backs off, as Megatron's does.
#   mixed_precision_test.sh MEGATRON_APP WORK_DIR
source "$(dirname "$0")/common.sh"
for precision in fp32 bf16 fp16; do
  flag=()
  [ "$precision" != fp32 ] && flag=(--set "training.$precision=true")
  run_tiny --set model.hidden_dropout=0.0 --set model.attention_dropout=0.0 --set training.train_iters=30 \
    --set training.eval_iters=0 --set training.lr=0.01 --set training.lr_decay_style=constant \
    --set "logging.metrics_file=$work/$precision.jsonl" "${flag[@]}" > /dev/null
done
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl") if '"train"' in l]
fp32, bf16, fp16 = rows("fp32"), rows("bf16"), rows("fp16")
for name, r in (("bf16", bf16), ("fp16", fp16)):
    first = abs(r[0]["lm loss"] - fp32[0]["lm loss"]) / fp32[0]["lm loss"]
    print(f"{name}: first loss {r[0]['lm loss']:.5f} vs fp32 {fp32[0]['lm loss']:.5f} (rel {first:.1e}); "
          f"last {r[-1]['lm loss']:.4f} vs fp32 {fp32[-1]['lm loss']:.4f}")
    assert first < 5e-3, f"{name} forward differs from fp32 by {first}"
    losses = [x["lm loss"] for x in r]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5, f"{name} did not train"
assert all(x["loss_scale"] == 1.0 and x["skipped_iterations"] == 0 for x in bf16), "bf16 scales"
skipped = sum(x["skipped_iterations"] for x in fp16)
scales = [x["loss_scale"] for x in fp16]
print(f"fp16: {skipped} skipped iterations, loss scale {scales[0]:.0f} -> {scales[-1]:.0f}")
assert skipped > 0 and scales[-1] < 2.0 ** 32, "the fp16 scaler never backed off"
assert fp16[0]["grad_norm"] is None, "an overflowing iteration reports no grad norm"
PY
