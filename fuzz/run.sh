#!/usr/bin/env bash
# Runs the libFuzzer targets for a given time each, one a core side by side, and summarises.
#   fuzz/run.sh [SECONDS] [TARGET...]     (default 30 s each, every target)
# Builds build-fuzz/ with clang first (CC/CXX are set to clang here). The corpus of each run
# starts from the recorded one (fuzz/corpus/TARGET), the seeds the target writes with the
# project's own writers, and the repository's configs and text; it grows in WORK/corpus/TARGET.
# Any crash, sanitizer report, leak, hang (> 10 s on one input) or use of more than 2.5 GB fails
# the run; the input that did it is kept as WORK/artifacts/TARGET-crash-... and named.
# FUZZ_WORK (default /tmp/megatron-fuzz) holds corpora, logs and artifacts; FUZZ_BUILD (default
# build-fuzz) the build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-30}
shift || true
all=(fuzz_config fuzz_indexed_dataset fuzz_npy fuzz_gpt2_tokenizer fuzz_wordpiece_tokenizer
     fuzz_preprocess_line fuzz_checkpoint)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
build=${FUZZ_BUILD:-$root/build-fuzz}
work=${FUZZ_WORK:-/tmp/megatron-fuzz}
mkdir -p "$work/artifacts"

if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMEGATRON_FUZZ=ON -DMEGATRON_CUDA=OFF -DMEGATRON_BUILD_TESTS=OFF > "$work/configure.log" \
    || { tail -20 "$work/configure.log"; exit 1; }
fi
cmake --build "$build" --target "${targets[@]}" > "$work/build.log" \
  || { grep -E "error|FAILED" "$work/build.log" | head -20; exit 1; }

# Text seeds: the repository's configs; chapters of the bundled corpus as text and as JSON lines.
text_seeds() {  # text_seeds TARGET DIR
  local target=$1 dir=$2
  case "$target" in
    fuzz_config)
      cp "$root"/configs/*.toml "$root"/tests/cli/configs/*.toml "$dir"/ 2> /dev/null || true ;;
    fuzz_gpt2_tokenizer | fuzz_wordpiece_tokenizer | fuzz_preprocess_line)
      /usr/bin/python3 - "$root/data/austen_chapters.jsonl" "$dir" "$target" <<'PY'
import json, sys
source, out, target = sys.argv[1:]
texts = [json.loads(line)["text"] for line, _ in zip(open(source, encoding="utf-8"), range(3))]
pieces = [t[i:i + 400] for t in texts for i in range(0, 1600, 400)]
pieces += ["naïve café — “quoted” ﬁ Ǆ 日本語の文。 Ünïcödé\t\r\n 🙂 e\u0301 \u200b", "Mr. Darcy! Is it? Yes.\n\nNo"]
for n, piece in enumerate(pieces):
    if target == "fuzz_preprocess_line":
        record = {"text": piece, "title": pieces[n - 1][:40]} if n % 2 else {"title": "t", "text": [piece, "Two."]}
        data = json.dumps(record, ensure_ascii=n % 3 == 0).encode()
    else:
        data = piece.encode()
    open(f"{out}/text_{n}", "wb").write(data)
PY
      ;;
  esac
}

max_len() {
  case "$1" in
    fuzz_checkpoint) echo 65536 ;;
    fuzz_config | fuzz_preprocess_line) echo 4096 ;;
    *) echo 2048 ;;
  esac
}

# Sanitizers as in the test suite; LeakSanitizer also ignores HDF5's own leaks (fuzz/lsan.supp).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=suppressions=$root/fuzz/lsan.supp:print_suppressions=0
export OMP_WAIT_POLICY=passive
# One target's run; its summary line goes to WORK/TARGET.result (and stdout), failures' report
# lines to stderr.
fuzz_one() {
  local target=$1 corpus=$work/corpus/$1 log=$work/$1.log code runs cov files artifact line
  mkdir -p "$corpus"
  [ -d "$root/fuzz/corpus/$target" ] && cp -n "$root/fuzz/corpus/$target"/* "$corpus"/ 2> /dev/null || true
  text_seeds "$target" "$corpus"
  set +e
  MEGATRON_FUZZ_SEEDS=$corpus "$build/bin/$target" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2560 -max_len="$(max_len "$target")" -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$target-" "$corpus" > "$log" 2>&1
  code=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -oE "cov: [0-9]+" "$log" | tail -1 | cut -d' ' -f2)
  files=$(find "$corpus" -type f | wc -l)
  if [ "$code" = 0 ]; then
    line="$target: ${runs:-?} inputs in ${seconds}s, coverage ${cov:-?} edges, corpus $files files: no crash, no sanitizer report, no hang"
  else
    artifact=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -1 | cut -d' ' -f5)
    line="$target: FAILED (exit $code) after ${runs:-?} inputs; input: ${artifact:-none}; log: $log"
    grep -E "ERROR|SUMMARY|runtime error|==ERROR|deadly|timeout|out-of-memory" "$log" | head -5 >&2 || true
  fi
  echo "$line" | tee "$work/$target.result"
}

# The targets side by side, one a core (FUZZ_JOBS): each libFuzzer process is single-threaded.
jobs=${FUZZ_JOBS:-$(nproc)}
for target in "${targets[@]}"; do
  rm -f "$work/$target.result"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  fuzz_one "$target" &
done
wait
status=0
summary=()
for target in "${targets[@]}"; do
  line=$(cat "$work/$target.result" 2> /dev/null || echo "$target: FAILED (no result)")
  [[ $line == *": FAILED"* ]] && status=1
  summary+=("$line")
done
printf '%s\n' "${summary[@]}" > "$work/summary.txt"
exit "$status"
