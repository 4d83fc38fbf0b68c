#!/usr/bin/env bash
# Exact resume: 8 iterations straight, or 4, stop (exit_interval), resume, 4 more, must give
# bitwise-identical losses for iterations 5-8 and bitwise-identical final weights and optimizer
# state (dropout on, so the RNG position is part of what must resume).
#   resume_test.sh MEGATRON_APP WORK_DIR
source "$(dirname "$0")/common.sh"

run_tiny --set "checkpoint.save=$work/straight" --set "logging.metrics_file=$work/straight.jsonl" > /dev/null
run_tiny --set "checkpoint.save=$work/resumed" --set "logging.metrics_file=$work/first.jsonl" \
    --set training.exit_interval=4 > /dev/null
test "$(cat "$work/resumed/latest_checkpointed_iteration.txt")" = 4
run_tiny --set "checkpoint.save=$work/resumed" --set "checkpoint.load=$work/resumed" \
    --set "logging.metrics_file=$work/second.jsonl" > /dev/null

/usr/bin/python3 - "$work" <<'PY'
import json, os, sys
import h5py, numpy as np
work = sys.argv[1]
def losses(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
    # every loss of the model (lm loss; BERT's sop loss; MoE's load_balancing_loss and z_loss)
    return {r["iteration"]: {k: v for k, v in r.items() if k.endswith("loss")}
            for r in rows if r["record"] == "train"}
straight, first, second = losses("straight"), losses("first"), losses("second")
assert sorted(first) == [1, 2, 3, 4], first
assert sorted(second) == [5, 6, 7, 8], second
for it in range(1, 9):
    got = first.get(it, second.get(it))
    assert got == straight[it], f"iteration {it}: resumed loss {got!r} != straight {straight[it]!r}"
assert straight[8]["lm loss"] < straight[1]["lm loss"], "loss did not fall"
for name in filter(None, os.environ.get("EXPECT_LOSSES", "").split(",")):
    assert all(name in straight[it] for it in range(1, 9)), f"{name} not logged every iteration"
a = h5py.File(f"{work}/straight/iter_0000008.h5")
b = h5py.File(f"{work}/resumed/iter_0000008.h5")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
assert any(n.startswith("optimizer/") for n in names) and any(n.startswith("model/") for n in names)
for n in names:
    assert np.array_equal(a[n][()], b[n][()]), f"{n} differs after resume"
for key in ("iteration", "consumed_train_samples"):
    assert a.attrs[key] == b.attrs[key], key
print(f"resume exact: losses of iterations 5-8 and {len(names)} tensors identical")
PY
