#!/usr/bin/env bash
# Soak test (not part of the suite: about half an hour on 2 cores). Trains configs/gpt_tiny.toml
# for ITERS iterations with a save every 100 and validation every 200, twice:
#   1. uninterrupted, sampling the process's resident memory once a second;
#   2. interrupted by SIGTERM at random moments (at least CYCLES times) and resumed each time.
# Checks: resident memory after warm-up grows < 5%, every checkpoint of both passes passes
# `inspect --verify`, and the final weights of pass 2 equal pass 1's bit for bit
# (`inspect --diff`). Prints the figures README's reliability section records.
#   tests/soak/soak.sh [APP] [WORK_DIR] [ITERS] [CYCLES]
#   (APP default build-release/bin/megatron-app; WORK_DIR default /tmp/megatron-soak)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
app=$(realpath "${1:-$root/build-release/bin/megatron-app}")
work=${2:-/tmp/megatron-soak}
iters=${3:-5000}
cycles=${4:-20}
fail() { echo "SOAK FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
run=("$app" --config "$root/configs/gpt_tiny.toml" --log-level warn
     --set "training.train_iters=$iters" --set training.eval_interval=200
     --set checkpoint.save_interval=100 --set "data.data_cache_path=$work/cache"
     --set logging.log_interval=100)

# Pass 1: uninterrupted, RSS sampled every second (kB, from /proc). Warm-up ends after the first
# validation (which follows the first save: HDF5 and the validation data allocate once) and not
# before a tenth of the run.
start=$(date +%s)
"${run[@]}" --set "checkpoint.save=$work/straight" > "$work/straight.log" 2>&1 &
pid=$!
warm_sample=0
while kill -0 "$pid" 2> /dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2> /dev/null || true)
  [ -n "$rss" ] && echo "$(($(date +%s) - start)) $rss" >> "$work/rss.txt"
  if [ "$warm_sample" = 0 ] && grep -q "validation loss at iteration" "$work/straight.log"; then
    warm_sample=$(wc -l < "$work/rss.txt")
  fi
  sleep 1
done
wait "$pid" || fail "pass 1 exited with $?: $(tail -3 "$work/straight.log")"
seconds=$(($(date +%s) - start))
read -r warm peak last < <(awk -v first="$warm_sample" '{ rss[NR] = $2 } END {
    w = int(NR / 10) + 1; if (first + 1 > w) w = first + 1; if (w > NR) w = NR
    warm = rss[w]; peak = 0
    for (i = w; i <= NR; i++) if (rss[i] > peak) peak = rss[i]
    print warm, peak, rss[NR] }' "$work/rss.txt")
growth=$(awk -v w="$warm" -v p="$peak" 'BEGIN { printf "%.2f", (p - w) * 100 / w }')
echo "pass 1: $iters iterations in ${seconds}s; RSS after warm-up ${warm} kB, peak ${peak} kB," \
     "at the end ${last} kB: growth ${growth}%"
awk -v g="$growth" 'BEGIN { exit !(g < 5) }' || fail "resident memory grew ${growth}% (limit 5%)"

# Pass 2: SIGTERM at a random moment 3-12 s into each run (the app saves and exits 0), resume.
resumed=("${run[@]}" --set "checkpoint.save=$work/interrupted" --set "checkpoint.load=$work/interrupted")
interruptions=0
while [ "$interruptions" -lt "$cycles" ]; do
  "${resumed[@]}" >> "$work/interrupted.log" 2>&1 &
  pid=$!
  sleep "$((RANDOM % 10 + 3)).$((RANDOM % 10))"
  kill -0 "$pid" 2> /dev/null || break  # finished before the signal
  kill -TERM "$pid"
  wait "$pid" || fail "interrupted run $interruptions exited with $?"
  interruptions=$((interruptions + 1))
  echo "interruption $interruptions: stopped at iteration $(cat "$work/interrupted/latest_checkpointed_iteration.txt")"
done
wait "$pid" 2> /dev/null || true
"${resumed[@]}" >> "$work/interrupted.log" 2>&1 || fail "final resumed run: $(tail -3 "$work/interrupted.log")"
[ "$interruptions" -ge "$cycles" ] || fail "only $interruptions interruptions before the end"
final=$(printf "iter_%07d.h5" "$iters")
"$app" inspect "$work/interrupted/$final" --diff "$work/straight/$final" > "$work/diff.log" \
  || fail "the interrupted run's final weights differ: $(tail -5 "$work/diff.log")"
echo "pass 2: $interruptions SIGTERM/resume cycles; final weights equal pass 1's bit for bit"

checked=0
for file in "$work"/straight/iter_*.h5 "$work"/interrupted/iter_*.h5; do
  "$app" inspect "$file" --verify > /dev/null || fail "$file does not verify"
  checked=$((checked + 1))
done
echo "every checkpoint verifies: $checked files"
echo "SOAK PASSED"
