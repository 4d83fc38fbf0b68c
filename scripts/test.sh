#!/usr/bin/env bash
# The whole test suite from a fresh clone: installs dependencies, builds, runs every test, then
# rebuilds with AddressSanitizer + UndefinedBehaviorSanitizer and runs the tests again there, and
# last runs every libFuzzer target for 20 s.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's time (m:ss), printed last (also when a stage fails) so that the tail of a CI log
# shows where the time went.
stages=()
stage() {
  stages+=("$SECONDS $*")
  echo "== $*"
}
report_stages() {
  local i start name next
  echo "== time by stage"
  for i in "${!stages[@]}"; do
    start=${stages[$i]%% *} name=${stages[$i]#* }
    next=$SECONDS
    [ $((i + 1)) -lt ${#stages[@]} ] && next=${stages[$((i + 1))]%% *}
    printf '%4d:%02d  %s\n' $(((next - start) / 60)) $(((next - start) % 60)) "$name"
  done
  printf '%4d:%02d  total\n' $((SECONDS / 60)) $((SECONDS % 60))
}
trap report_stages EXIT

stage "dependencies"
bash scripts/install-deps.sh test

# The tests' builds keep line tables only (-g1: sanitizer reports still name files and lines):
# a quarter less compile time than full debug information.
line_tables=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
             -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")

stage "build (RelWithDebInfo with line tables, warnings as errors)"
mkdir -p build
# The CUDA backend (where nvcc is present) for one architecture: CI checks that it compiles and
# links, and each further architecture is another nvcc pass over every kernel.
bash scripts/build.sh build "${line_tables[@]}" -DCMAKE_CUDA_ARCHITECTURES=90
# Passive OpenMP waiting: ctest runs tests side by side on few cores, where spinning threads
# steal the cores their team mates need (a 10x slowdown measured on 2 cores).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
stage "tests"
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 600

stage "build with AddressSanitizer + UndefinedBehaviorSanitizer"
mkdir -p build-asan
bash scripts/build.sh build-asan -DMEGATRON_SANITIZE=ON -DMEGATRON_CUDA=OFF "${line_tables[@]}"
stage "tests under the sanitizers"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export LSAN_OPTIONS=suppressions=$PWD/tests/sanitizer/lsan.supp:print_suppressions=0
ctest --test-dir build-asan --output-on-failure -j "$(nproc)" --timeout 900

stage "fuzzing: every libFuzzer target for 20 s (clang, ASan + UBSan)"
FUZZ_BUILD=$PWD/build-fuzz FUZZ_WORK=$PWD/build-fuzz/work bash fuzz/run.sh 20
