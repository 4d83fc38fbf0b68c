#!/usr/bin/env bash
# Fine-tuning at a parallel layout gives the one-rank run: the same losses at every iteration
# (relative 1e-5), the same accuracies after every epoch and the same final weights (dropout off:
# at TP > 1 attention dropout draws other masks, as in Megatron).
#   finetune_layout_test.sh APP CONFIG PRETRAINED WORK MPIRUN... -- LAYOUT_SETS...
set -euo pipefail
app=$1 config=$2 pretrained=$3 work=$4
shift 4
launch=()
while [ "$1" != "--" ]; do launch+=("$1"); shift; done
shift
rm -rf "$work" && mkdir -p "$work"
run() {  # run NAME LAUNCH... -- SETS...
  local name=$1; shift
  local pre=()
  while [ "$1" != "--" ]; do pre+=("$1"); shift; done
  shift
  "${pre[@]}" "$app" --config "$config" --log-level warn \
    --set "task.pretrained_checkpoint=\"$pretrained\"" --set task.epochs=2 \
    --set model.hidden_dropout=0 --set model.attention_dropout=0 --set training.lr=1e-4 \
    --set "checkpoint.save=\"$work/$name\"" --set "task.results_file=\"$work/$name.json\"" \
    --set "logging.metrics_file=\"$work/$name.jsonl\"" "$@" > "$work/$name.out"
}
run one -- 
run layout "${launch[@]}" -- "$@"
/usr/bin/python3 - "$work" <<'PY'
import json, sys
import h5py, numpy as np
work = sys.argv[1]
def losses(name):
    return {r["iteration"]: r["lm loss"] for r in map(json.loads, open(f"{work}/{name}.jsonl"))
            if r["record"] == "train"}
one, layout = losses("one"), losses("layout")
assert sorted(one) == sorted(layout) and one, (sorted(one), sorted(layout))
for it in one:
    assert abs(one[it] - layout[it]) <= 1e-5 * abs(one[it]), f"iteration {it}: {one[it]} vs {layout[it]}"
a, b = json.load(open(f"{work}/one.json")), json.load(open(f"{work}/layout.json"))
assert a["epochs"] == b["epochs"], f"accuracies differ:\n{a['epochs']}\n{b['epochs']}"
last = max(int(open(f"{work}/one/latest_checkpointed_iteration.txt").read()), 0)
fa = h5py.File(f"{work}/one/iter_{last:07d}.h5")
fb = h5py.File(f"{work}/layout/iter_{last:07d}.h5")
names = []
fa["model"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
assert any(n.startswith("classification_head") or n.startswith("multichoice_head") for n in names)
worst = 0.0
for n in names:
    if n == "multichoice_head.bias":
        # Its gradient is zero in exact arithmetic (a sample's choices share one softmax, which a
        # common shift does not change), so Adam steps on round-off: nothing to compare.
        continue
    x, y = fa["model"][n][()], fb["model"][n][()]
    worst = max(worst, float(np.max(np.abs(x - y))))
    # Adam normalises every element's step, so an element whose gradient is at round-off level
    # can move differently by a fraction of lr (1e-4 here): allow 10% of lr.
    assert np.allclose(x, y, rtol=1e-4, atol=1e-5), f"{n}: max difference {np.max(np.abs(x - y))}"
print(f"{len(one)} iterations, {len(a['epochs'])} epochs and {len(names)} tensors agree "
      f"(largest weight difference {worst:.2e})")
PY
