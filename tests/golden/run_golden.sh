#!/usr/bin/env bash
# Trains the golden configs and prints their losses as JSON (record), or compares them with
# gpt_losses.json (check): bit for bit on the kind of machine they were recorded on (GEMM results
# depend on the CPU's kernels), within 1e-5 (fp32) / 1e-3 (bf16) relative elsewhere, saying which.
# Usage: run_golden.sh record|check MEGATRON_APP WORK_DIR [BUILD_FLAVOUR]
# BUILD_FLAVOUR (e.g. "sanitized") names a build compiled differently from the recording's
# (RelWithDebInfo): its code generation, and so its rounding, differs, so it is compared within
# the tolerance too.
set -euo pipefail  # (a grep that finds nothing fails the pipeline: `|| true` where that is fine)
mode=$1 app=$2 work=$3 flavour=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=2
mkdir -p "$work"
machine="$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') | $({ grep -m1 -o -w -E 'amx_bf16|avx512_bf16' /proc/cpuinfo || true; } | sort -u | tr '\n' ' ')| threads $OMP_NUM_THREADS${flavour:+ | $flavour build}"
run() {  # name config [--set ...]
  local name=$1 config=$2; shift 2
  rm -f "$work/$name.jsonl"
  "$app" --config "$here/$config" --set "logging.metrics_file=\"$work/$name.jsonl\"" "$@" > "$work/$name.log" 2>&1 \
    || { cat "$work/$name.log"; exit 1; }
}
if [ "${GOLDEN_REUSE:-0}" != 1 ]; then  # GOLDEN_REUSE=1: compare the last runs' files again
  run a gpt_a.toml
  run b gpt_b.toml
  run a_bf16 gpt_a.toml --set training.bf16=true
fi
/usr/bin/python3 - "$mode" "$work" "$here/gpt_losses.json" "$machine" <<'PY'
import json, sys
mode, work, golden_path, machine = sys.argv[1:5]
runs = {}
for name in ("a", "b", "a_bf16"):
    rows = [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
    # every loss and the gradient norm of each training and evaluation line
    runs[name] = [[r["iteration"], r["record"],
                   {k: v for k, v in r.items() if ("loss" in k and k != "loss_scale") or k == "grad_norm"}]
                  for r in rows]
if mode == "record":
    json.dump({"machine": machine, "runs": runs}, open(golden_path, "w"), indent=1)
    print(f"recorded {sum(len(v) for v in runs.values())} loss lines on: {machine}")
    sys.exit(0)
golden = json.load(open(golden_path))
exact = golden["machine"] == machine
# Elsewhere the GEMM kernels (and, for bf16, how products are rounded and accumulated) differ:
# fp32 runs within 1e-5 relative, bf16 runs within 1e-3.
def tolerance(name):
    return 0.0 if exact else (1e-3 if name.endswith("bf16") else 1e-5)
print("bit for bit" if exact else
      f"within 1e-5 (fp32) / 1e-3 (bf16) relative: this machine ({machine}) is not the recording's ({golden['machine']})")
bad = 0
for name, want in golden["runs"].items():
    got = runs[name]
    tol = tolerance(name)
    if len(got) != len(want):
        print(f"{name}: {len(got)} loss lines, recorded {len(want)}"); bad += 1; continue
    for (gi, gk, gl), (wi, wk, wl) in zip(got, want):
        if (gi, gk) != (wi, wk) or set(gl) != set(wl):
            print(f"{name}: line {gi} {gk} {sorted(gl)} vs recorded {wi} {wk} {sorted(wl)}"); bad += 1; continue
        for key in wl:
            if abs(gl[key] - wl[key]) > tol * abs(wl[key]):
                print(f"{name} iteration {gi} {gk} {key}: {gl[key]!r} vs recorded {wl[key]!r}"); bad += 1
print(f"{sum(len(v) for v in golden['runs'].values())} loss lines compared, {bad} differ")
sys.exit(1 if bad else 0)
PY
