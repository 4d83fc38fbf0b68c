#!/usr/bin/env bash
# Sample-based training through the trainer: train_samples with a batch-size ramp-up and a cosine
# schedule counted in samples. The global batch size, consumed samples, number of iterations and
# learning rate of every iteration must follow Megatron's rules, recomputed here independently
# (megatron/core/num_microbatches_calculator.py, training.py update_train_iters,
# optimizer_param_scheduler.py).
#   rampup_samples_test.sh MEGATRON_APP WORK_DIR
source "$(dirname "$0")/common.sh"
# tiny_gpt.toml counts in iterations; a copy without those keys, with the data paths made absolute.
sed '/^train_iters/d; /^lr_warmup_iters/d; s|"\.\./\.\./data/|"'"$here"'/../../data/|' \
  "$here/tiny_gpt.toml" > "$work/samples.toml"
"$app" --config "$work/samples.toml" --log-level warn --set "data.data_cache_path=$work/cache" \
  --set training.train_samples=70 \
  --set training.global_batch_size=8 --set training.micro_batch_size=2 \
  --set "training.rampup_batch_size=[2, 2, 24]" \
  --set training.lr_warmup_samples=6 --set training.lr_decay_samples=60 --set training.min_lr=1e-4 \
  --set training.eval_interval=1000 --set "logging.metrics_file=$work/m.jsonl" > /dev/null

/usr/bin/python3 - "$work/m.jsonl" <<'PY'
import json, math, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if r["record"] == "train"]
start, incr, ramp, gbs, train_samples = 2, 2, 24, 8, 70
per_increment = ramp / ((gbs - start) / incr)
def batch(consumed):
    if consumed > ramp:
        return gbs
    return min(gbs, start + int(consumed / per_increment) * incr)
# update_train_iters: the ramp-up phase counted batch by batch, then whole full batches.
iters, consumed = 0, 0
while consumed <= ramp and consumed <= train_samples:
    consumed += batch(consumed)
    iters += 1
iters += (train_samples - consumed) // gbs if train_samples > consumed else 0
lr, min_lr, warmup, decay = 1e-3, 1e-4, 6, 60
def lr_at(steps):
    if steps <= warmup:
        return lr * steps / warmup
    ratio = (steps - warmup) / (decay - warmup)
    if ratio > 1:
        return min_lr
    return min_lr + (lr - min_lr) * 0.5 * (math.cos(math.pi * ratio) + 1.0)
assert [r["iteration"] for r in rows] == list(range(1, iters + 1)), (len(rows), iters)
consumed = 0
for r in rows:
    b = batch(consumed)
    consumed += b
    assert r["global_batch_size"] == b, (r["iteration"], r["global_batch_size"], b)
    assert r["consumed_samples"] == consumed, (r["iteration"], r["consumed_samples"], consumed)
    assert abs(r["lr"] - lr_at(consumed)) <= 1e-12, (r["iteration"], r["lr"], lr_at(consumed))
sizes = [r["global_batch_size"] for r in rows]
print(f"{iters} iterations, global batch sizes {sizes}, {consumed} samples, final lr {rows[-1]['lr']:.3e}")
assert sizes[0] == 2 and sizes[-1] == 8 and 4 in sizes and 6 in sizes
PY
