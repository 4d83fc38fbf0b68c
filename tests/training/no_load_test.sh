#!/usr/bin/env bash
# Megatron's no_load_optim and no_load_rng on resume. From a checkpoint of iteration 4 (dropout
# on), 4 more iterations:
#  - no_load_optim: the weights, iteration, data position and learning-rate schedule continue
#    (iteration 5's loss and lr equal the straight run's) but Adam starts from zero moments and
#    step 0, so the updates and the later losses differ;
#  - rng loaded (the default) beats a changed [training] seed: the saved dropout seed is kept;
#  - no_load_rng: the configured seed drives dropout instead; with the seed unchanged the run is
#    the straight run exactly, so nothing else was skipped.
#   no_load_test.sh MEGATRON_APP WORK_DIR
source "$(dirname "$0")/common.sh"
run_tiny --set "checkpoint.save=$work/straight" --set "logging.metrics_file=$work/straight.jsonl" > /dev/null
run_tiny --set "checkpoint.save=$work/first" --set training.exit_interval=4 > /dev/null
resume() {  # resume NAME ARGS...: 4 more iterations from the iteration-4 checkpoint
  local name=$1
  shift
  run_tiny --set "checkpoint.load=$work/first" --set "checkpoint.save=$work/$name" \
    --set "logging.metrics_file=$work/$name.jsonl" "$@" > /dev/null
}
resume no_optim --set checkpoint.no_load_optim=true
resume seed99 --set training.seed=99
resume seed99_no_rng --set training.seed=99 --set checkpoint.no_load_rng=true
resume no_rng --set checkpoint.no_load_rng=true

/usr/bin/python3 - "$work" <<'PY'
import json, sys
import h5py, numpy as np
work = sys.argv[1]
def rows(name):
    return {r["iteration"]: r for r in map(json.loads, open(f"{work}/{name}.jsonl")) if r["record"] == "train"}
def ckpt(name):
    return h5py.File(f"{work}/{name}/iter_0000008.h5")
straight = rows("straight")

r = rows("no_optim")
assert sorted(r) == [5, 6, 7, 8], sorted(r)
assert r[5]["lm loss"] == straight[5]["lm loss"], "iteration 5 sees other weights or data"
assert all(r[i]["lr"] == straight[i]["lr"] for i in r), "the lr schedule did not continue"
assert r[6]["lm loss"] != straight[6]["lm loss"], "no_load_optim changed nothing"
a, b = ckpt("straight"), ckpt("no_optim")
assert b.attrs["int.optimizer.steps"] == 4 and a.attrs["int.optimizer.steps"] == 8
assert b.attrs["consumed_train_samples"] == a.attrs["consumed_train_samples"]
print(f"no_load_optim: loss 6 {r[6]['lm loss']:.6f} vs straight {straight[6]['lm loss']:.6f}, "
      f"optimizer steps {b.attrs['int.optimizer.steps']}")

kept, fresh = rows("seed99"), rows("seed99_no_rng")
assert ckpt("seed99").attrs["int.rng.seed"] == 1234, "the checkpoint's rng seed was not kept"
assert ckpt("seed99_no_rng").attrs["int.rng.seed"] == 99, "no_load_rng did not use the config seed"
# Same weights, optimizer and data (the data order follows [training] seed in both): only the
# dropout masks differ.
assert kept[5]["lm loss"] != fresh[5]["lm loss"], "the dropout seed made no difference"
print(f"no_load_rng: iteration 5 loss {fresh[5]['lm loss']:.6f} (seed 99) vs {kept[5]['lm loss']:.6f} (saved seed)")

same = rows("no_rng")
assert all(same[i]["lm loss"] == straight[i]["lm loss"] for i in range(5, 9)), "no_load_rng lost state"
x, y = ckpt("straight"), ckpt("no_rng")
names = []
x.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
for n in names:
    assert np.array_equal(x[n][()], y[n][()]), f"{n} differs"
print("no_load_rng with the same seed: identical to the straight run")
PY
