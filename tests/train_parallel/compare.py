"""Compares a run with the reference run of the train_parallel tests.

compare.py losses REF.jsonl GOT.jsonl FIRST LAST   every loss (lm loss, sop loss, load_balancing_loss,
                                                   ...) and the gradient norm of iterations
                                                   FIRST..LAST, 1e-5 relative
compare.py weights REF.h5 GOT.h5                   every model/ and optimizer/ tensor, same names and
                                                   shapes, values within WEIGHT_ATOL (absolute)
"""
import json
import sys

LOSS_RTOL = 1e-5
# Summation order differs between layouts (fp32 round-off, ~1e-7 relative per reduction) and Adam
# amplifies it where a gradient is near zero; 20 steps at lr 1e-3 stay far inside this.
WEIGHT_ATOL = 1e-4


def losses(path):
    rows = [json.loads(line) for line in open(path)]
    return {r["iteration"]: {k: v for k, v in r.items() if k.endswith("loss") or k == "grad_norm"}
            for r in rows if r["record"] == "train"}


def compare_losses(ref_path, got_path, first, last):
    ref, got = losses(ref_path), losses(got_path)
    worst = 0.0
    for it in range(first, last + 1):
        assert it in ref, f"{ref_path} has no iteration {it}"
        assert it in got, f"{got_path} has no iteration {it}"
        assert sorted(got[it]) == sorted(ref[it]), f"iteration {it}: losses {sorted(got[it])} vs {sorted(ref[it])}"
        for name, want in ref[it].items():
            rel = abs(got[it][name] - want) / abs(want)
            worst = max(worst, rel)
            assert rel <= LOSS_RTOL, f"iteration {it}: {name} {got[it][name]!r} vs {want!r} ({rel:.2e} relative)"
    extra = sorted(set(got) - set(range(first, last + 1)))
    assert not extra, f"{got_path} has unexpected iterations {extra}"
    print(f"losses {first}-{last}: max relative difference {worst:.2e} (limit {LOSS_RTOL:g})")


def compare_weights(ref_path, got_path):
    import h5py
    import numpy as np

    def tensors(path):
        out = {}
        with h5py.File(path, "r") as f:
            f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
        return out

    ref, got = tensors(ref_path), tensors(got_path)
    assert sorted(ref) == sorted(got), f"tensor names differ: {sorted(set(ref) ^ set(got))}"
    worst = {"model": (0.0, ""), "optimizer": (0.0, "")}
    for name in ref:
        assert ref[name].shape == got[name].shape, f"{name}: {got[name].shape} vs {ref[name].shape}"
        diff = float(np.max(np.abs(ref[name].astype(np.float64) - got[name]))) if ref[name].size else 0.0
        kind = name.split("/")[0]
        if diff > worst[kind][0]:
            worst[kind] = (diff, name)
        if kind == "model":
            assert diff <= WEIGHT_ATOL, f"{name}: max |difference| {diff:.2e} > {WEIGHT_ATOL:g}"
    # Adam's second moment is tiny and its first moment follows the gradient: compared relatively.
    for name in ref:
        if name.startswith("optimizer/") and ref[name].size:
            scale = float(np.max(np.abs(ref[name]))) or 1.0
            rel = float(np.max(np.abs(ref[name].astype(np.float64) - got[name]))) / scale
            assert rel <= 1e-3, f"{name}: max difference {rel:.2e} of its largest value"
    print(f"{len(ref)} tensors: weights max |difference| {worst['model'][0]:.2e} ({worst['model'][1]}), "
          f"optimizer state {worst['optimizer'][0]:.2e} ({worst['optimizer'][1]})")


if __name__ == "__main__":
    if sys.argv[1] == "losses":
        compare_losses(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "weights":
        compare_weights(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown mode {sys.argv[1]!r}")
