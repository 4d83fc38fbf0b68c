#!/usr/bin/env bash
# Exact resume in the middle of a fine-tuning epoch: 2 epochs straight, or stopped at iteration
# STOP (exit_interval) and resumed from the saved checkpoint, give bitwise-identical losses, the
# same last-epoch accuracies and bitwise-identical final weights and optimizer state (dropout on).
#   finetune_resume_test.sh APP CONFIG PRETRAINED WORK STOP
set -euo pipefail
app=$1 config=$2 pretrained=$3 work=$4 stop=$5
rm -rf "$work" && mkdir -p "$work"
run() {
  "$app" --config "$config" --log-level warn --set "task.pretrained_checkpoint=\"$pretrained\"" \
    --set task.epochs=2 --set training.lr=1e-3 --set logging.log_interval=1 "$@" > /dev/null
}
run --set "checkpoint.save=\"$work/straight\"" --set "task.results_file=\"$work/straight.json\"" \
    --set "logging.metrics_file=\"$work/straight.jsonl\""
run --set "checkpoint.save=\"$work/resumed\"" --set "logging.metrics_file=\"$work/first.jsonl\"" \
    --set "task.results_file=\"$work/first.json\"" \
    --set training.exit_interval=$stop
test "$(cat "$work/resumed/latest_checkpointed_iteration.txt")" = "$stop"
run --set "checkpoint.save=\"$work/resumed\"" --set "checkpoint.load=\"$work/resumed\"" \
    --set "task.results_file=\"$work/resumed.json\"" --set "logging.metrics_file=\"$work/second.jsonl\""
/usr/bin/python3 - "$work" "$stop" <<'PY'
import json, sys
import h5py, numpy as np
work, stop = sys.argv[1], int(sys.argv[2])
def losses(name):
    return {r["iteration"]: r["lm loss"] for r in map(json.loads, open(f"{work}/{name}.jsonl"))
            if r["record"] == "train"}
straight, first, second = losses("straight"), losses("first"), losses("second")
assert sorted(first) == list(range(1, stop + 1)), sorted(first)
assert min(second) == stop + 1 and sorted(straight) == sorted({**first, **second}), sorted(second)
for it, loss in straight.items():
    assert first.get(it, second.get(it)) == loss, f"iteration {it} differs after resume"
a, b = json.load(open(f"{work}/straight.json")), json.load(open(f"{work}/resumed.json"))
assert a["epochs"][-1] == b["epochs"][-1], (a["epochs"][-1], b["epochs"][-1])
last = max(straight)
fa, fb = h5py.File(f"{work}/straight/iter_{last:07d}.h5"), h5py.File(f"{work}/resumed/iter_{last:07d}.h5")
names = []
fa.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
for n in names:
    assert np.array_equal(fa[n][()], fb[n][()]), f"{n} differs after resume"
print(f"resumed at {stop}: {len(straight)} losses, the last epoch's accuracies and {len(names)} "
      "tensors identical")
PY
