#!/usr/bin/env bash
# The GPU check kit (docs/gpu-runs.md). The CUDA backend is built and linked on every development
# machine but can only run where a GPU is lent, and that machine is bare: CUDA's toolkit, no
# Debian packages, no network, 64 MiB carried to it. So:
#   scripts/gpu-check.sh pack [PACK]   here: a Release build with the CUDA backend (sm_80, sm_90),
#       megatron-app, its plugins and the CUDA test binaries, with every shared library they need
#       that a CUDA-only machine lacks, taken from Debian's packages (apt-get download), in one xz
#       file (default gpu-check.tar.xz); fails when it and the checkout's tracked files (which
#       travel with it, configs and data among them) exceed the device tool's 64 MiB.
#   scripts/gpu-check.sh run [PACK|DIR]   there, in a checkout (or anywhere): unpacks, sets the library paths and
#       runs the checks in bounded time, writing gpu-check-summary.txt (PASS / FAIL / SKIP, with
#       seconds and details); exit 1 when a check failed. Without a CUDA device every CUDA check
#       says SKIP and why, and the CPU parts run.
set -euo pipefail

readonly kTravelLimit=$((64 * 1024 * 1024))  # the device tool carries the tree and the pack
readonly kTimeLimit=${GPU_CHECK_SECONDS:-480}  # the whole run, in seconds

usage() {
  sed -n '2,15p' "$0" >&2
  exit 2
}

# ---- pack -------------------------------------------------------------------------------------

# Shared libraries the binaries under $1 load, resolved here, minus what a machine with CUDA's
# toolkit has: the C runtime and compiler libraries, CUDA's own, and ours.
needed_libraries() {
  find "$1" -type f \( -name '*.so*' -o -perm -u+x \) -print0 |
    xargs -0 file -L | awk -F: '/ELF/ {print $1}' |
    xargs -r ldd 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libgcc_s|libstdc\+\+)\.so' |
    grep -vE '/(libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvrtc|libnvJitLink)\.so' |
    grep -v "$1" | grep -v "/libmegatron_[a-z_]*\.so" || true
}

# The Debian package that owns a library file, as ldd names it or as its link resolves, under
# /lib or /usr/lib (merged /usr: dpkg knows each file under one of the two).
owner_of() {
  local real candidates=() p
  real=$(readlink -f "$1")
  for p in "$1" "$real"; do
    candidates+=("$p" "${p#/usr}")
    [ "${p#/usr/}" = "$p" ] && candidates+=("/usr$p")
  done
  for p in "${candidates[@]}"; do
    if dpkg -S "$p" > /dev/null 2>&1; then
      dpkg -S "$p" | head -1 | cut -d: -f1
      return
    fi
  done
  echo "gpu-check pack: no Debian package owns $1" >&2
  return 1
}

# The Debian packages that own these files, unpacked from the archive into $2 (never copied from
# this machine's /usr/lib, so the kit says exactly which package versions it carries).
unpack_packages() {
  local list=$1 into=$2 debs=$3 pkg
  mkdir -p "$into" "$debs"
  : > "$debs/packages.txt"
  while read -r lib; do
    owner_of "$lib"
  done < "$list" | sort -u > "$debs/owners.txt"
  # OpenMPI loads its components, help texts and PMIx at run time: its whole runtime goes along.
  printf '%s\n' openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7 \
    libevent-pthreads-2.1-7 >> "$debs/owners.txt"
  sort -u -o "$debs/owners.txt" "$debs/owners.txt"
  (cd "$debs" && xargs -a owners.txt apt-get download -q >/dev/null) ||
    { echo "gpu-check pack: apt-get download failed for: $(tr '\n' ' ' < "$debs/owners.txt")" >&2; exit 1; }
  for pkg in "$debs"/*.deb; do
    dpkg-deb -x "$pkg" "$into"
    dpkg-deb -W --showformat='${Package} ${Version}\n' "$pkg" >> "$debs/packages.txt"
  done
  # Libraries Debian reaches through update-alternatives (libopenblas.so.0, libblas.so.3, ...)
  # live in a subfolder of the package: link each needed name into the library folder.
  local lib name found libdir=$into/usr/lib/x86_64-linux-gnu
  while read -r lib; do
    name=$(basename "$lib")
    [ -e "$libdir/$name" ] || [ -e "$into/lib/x86_64-linux-gnu/$name" ] && continue
    found=$(find "$into" -name "$name" \( -type f -o -type l \) | head -1)
    [ -n "$found" ] || { echo "gpu-check pack: $name is in none of the packages" >&2; exit 1; }
    ln -s "$(realpath --relative-to="$libdir" "$found")" "$libdir/$name"
  done < "$list"
  # Documentation, manuals and headers are not run.
  rm -rf "$into/usr/share/doc" "$into/usr/share/man" "$into/usr/include" "$into/usr/share/lintian"
}

pack() {
  local out=${1:-gpu-check.tar.xz} root build stage
  root=$(cd "$(dirname "$0")/.." && pwd)
  out=$(realpath -m "$out")
  build=${GPU_CHECK_BUILD:-$root/build-gpu}
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
    { echo "gpu-check pack: no nvcc (CUDA toolkit at /usr/local/cuda): the kit is a CUDA build" >&2; exit 1; }
  export PATH=/usr/local/cuda/bin:$PATH
  echo "gpu-check pack: building $build (Release, CUDA sm_80 and sm_90)"
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGATRON_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="80;90" > "$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; exit 1; }
  grep -q "^MEGATRON_HAVE_CUDA:INTERNAL=ON\|CUDA backend enabled" "$build.configure.log" "$build/CMakeCache.txt" ||
    { echo "gpu-check pack: CMake did not enable the CUDA backend (see $build.configure.log)" >&2; exit 1; }
  # What the kit carries, not the whole tree: the host, its plugins, the backend test binaries.
  local targets
  targets=$(ninja -C "$build" -t targets all | cut -d: -f1 |
    grep -E '^(bin/megatron-app|lib/megatron/plugins/.*\.so|bin/backend_[a-z0-9_]*_test)$')
  # shellcheck disable=SC2086
  ninja -C "$build" $targets
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  local kit=$stage/megatron-gpu-check
  mkdir -p "$kit/bin" "$kit/tests"
  cp -a "$build/bin/megatron-app" "$kit/bin/"
  cp -a "$build/lib" "$kit/lib"
  # The backend conformance suite: every test binary with CUDA instances.
  local t
  for t in "$build"/bin/backend_*_test; do
    "$t" --gtest_list_tests | grep -qi cuda && cp -a "$t" "$kit/tests/"
  done
  strip --strip-unneeded "$kit/bin/megatron-app" "$kit"/tests/* $(find "$kit/lib" -name '*.so*' -type f)
  needed_libraries "$kit" > "$stage/libraries.txt"
  unpack_packages "$stage/libraries.txt" "$kit/deps" "$stage/debs"
  cp "$stage/debs/packages.txt" "$kit/deps/PACKAGES.txt"
  # xz -9 on one thread (one block, the largest window): oneDNN's and OpenBLAS's per-CPU kernel
  # copies shrink to 34 MiB where gzip left 60 MiB of the Debian libraries alone.
  tar -C "$stage" -cf - megatron-gpu-check | xz -9 -T1 > "$out"
  local size tree
  size=$(stat -c %s "$out")
  tree=$(cd "$root" && git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {print s}')
  echo "gpu-check pack: $out, $((size / 1024 / 1024)) MiB ($(wc -l < "$kit/deps/PACKAGES.txt") Debian packages, $(ls "$kit/tests" | wc -l) test binaries); with the checkout's $((tree / 1024 / 1024)) MiB it travels with: $(((size + tree) / 1024 / 1024)) of 64 MiB"
  if [ $((size + tree)) -gt "$kTravelLimit" ]; then
    echo "gpu-check pack: over the device tool's 64 MiB" >&2
    exit 1
  fi
}

# ---- run --------------------------------------------------------------------------------------

summary=""
failures=0
started=$SECONDS

# record STATUS NAME SECONDS DETAIL
record() {
  printf '%-4s %-44s %6ss  %s\n' "$1" "$2" "$3" "$4" | tee -a "$summary"
  [ "$1" = FAIL ] && failures=$((failures + 1))
  return 0
}

time_left() {
  echo $((kTimeLimit - (SECONDS - started)))
}

# Runs a command with what is left of the time limit (at most $1 seconds), its output in $2.
bounded() {
  local limit=$1 log=$2 left
  shift 2
  left=$(time_left)
  [ "$left" -lt "$limit" ] && limit=$left
  [ "$limit" -le 0 ] && { echo "no time left" > "$log"; return 124; }
  timeout --kill-after=5 "$limit" "$@" > "$log" 2>&1
}

# Every lm loss (or loss) value of a metrics file, one a line.
losses_of() {
  sed -n 's/.*"record":"train".*"lm loss":\([-0-9.eE+]*\).*/\1/p' "$1"
}

# Whether two columns of losses agree within a relative tolerance, line by line.
losses_agree() {
  local a=$1 b=$2 tol=$3
  [ -s "$a" ] && [ "$(wc -l < "$a")" = "$(wc -l < "$b")" ] &&
    paste "$a" "$b" | awk -v tol="$tol" '{d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1;
      if (d > tol * (m > 1 ? m : 1)) bad = 1} END {exit bad}'
}

# A few training iterations of a tiny config on DEVICE, the losses in $work/NAME.DEVICE.losses;
# without dropout, so that the devices' losses differ only by their arithmetic.
train_tiny() {
  local name=$1 device=$2 iters=$3
  shift 3
  bounded 120 "$work/$name.$device.log" "$kit/bin/megatron-app" --config "$checkout/configs/$name.toml" \
    --set "runtime.device=$device" --set "training.train_iters=$iters" --set training.eval_iters=0 --set training.lr_warmup_iters=0 \
    --set logging.log_interval=1 --set "logging.metrics_file=$work/$name.$device.jsonl" \
    --set checkpoint.save= --set "data.data_cache_path=$work/cache" \
    --set model.hidden_dropout=0 --set model.attention_dropout=0 "$@" &&
    losses_of "$work/$name.$device.jsonl" > "$work/$name.$device.losses"
}

check_conformance() {
  local t status passed skipped failed t0
  for t in "$kit"/tests/*; do
    t0=$SECONDS
    status=PASS
    bounded 90 "$work/$(basename "$t").log" "$t" --gtest_filter='*cuda*:*Cuda*:*CUDA*' || status=FAIL
    passed=$(grep -c '^\[       OK \]' "$work/$(basename "$t").log" || true)
    skipped=$(grep -c '^\[  SKIPPED \]' "$work/$(basename "$t").log" || true)
    failed=$(grep -c '^\[  FAILED  \]' "$work/$(basename "$t").log" || true)
    if [ "$status" = PASS ] && [ "$passed" = 0 ] && [ "$skipped" -gt 0 ]; then
      status=SKIP
    fi
    record "$status" "conformance $(basename "$t")" $((SECONDS - t0)) \
      "$passed passed, $skipped skipped, $failed failed$( [ $status = SKIP ] && echo ": $(grep -m1 -A1 'SKIPPED\|Skipped' "$work/$(basename "$t").log" | tail -1 | cut -c1-80)")"
  done
}

check_training() {
  local name t0 tol
  for name in gpt_tiny bert_tiny t5_tiny mamba_tiny; do
    t0=$SECONDS
    if ! train_tiny "$name" cpu 6; then
      record FAIL "train $name cpu" $((SECONDS - t0)) "$(tail -2 "$work/$name.cpu.log" | tr '\n' ' ')"
      continue
    fi
    if [ "$gpus" = 0 ]; then
      record SKIP "train $name cuda vs cpu" $((SECONDS - t0)) "no CUDA device ($gpu_reason); cpu ran: $(paste -sd' ' "$work/$name.cpu.losses")"
      continue
    fi
    # fp32 on the GPU may use TF32 products and other reduction orders: 2e-3 relative.
    tol=2e-3
    if train_tiny "$name" cuda 6 && losses_agree "$work/$name.cpu.losses" "$work/$name.cuda.losses" $tol; then
      record PASS "train $name cuda vs cpu" $((SECONDS - t0)) "losses within $tol: $(paste -sd' ' "$work/$name.cuda.losses")"
    else
      record FAIL "train $name cuda vs cpu" $((SECONDS - t0)) "cpu $(paste -sd' ' "$work/$name.cpu.losses" 2>/dev/null); cuda $(paste -sd' ' "$work/$name.cuda.losses" 2>/dev/null); $(tail -2 "$work/$name.cuda.log" | tr '\n' ' ')"
    fi
  done
}

check_checkpoint() {
  local t0=$SECONDS ckpt=$work/ckpt
  if [ "$gpus" = 0 ]; then
    record SKIP "checkpoint saved on cuda, loaded on cpu" 0 "no CUDA device ($gpu_reason)"
    return
  fi
  if bounded 120 "$work/ckpt_save.log" "$kit/bin/megatron-app" --config "$checkout/configs/gpt_tiny.toml" \
       --set runtime.device=cuda --set training.train_iters=4 --set training.eval_iters=0 \
       --set training.lr_warmup_iters=0 \
       --set "checkpoint.save=$ckpt" --set checkpoint.save_interval=4 \
       --set "data.data_cache_path=$work/cache" &&
     bounded 60 "$work/ckpt_verify.log" "$kit/bin/megatron-app" inspect --verify "$ckpt" &&
     bounded 120 "$work/ckpt_load.log" "$kit/bin/megatron-app" --config "$checkout/configs/gpt_tiny.toml" \
       --set runtime.device=cpu --set training.train_iters=6 --set training.eval_iters=0 \
       --set training.lr_warmup_iters=0 \
       --set "checkpoint.load=$ckpt" --set checkpoint.save= \
       --set "data.data_cache_path=$work/cache" &&
     grep -q "iteration 4" "$work/ckpt_load.log"; then
    record PASS "checkpoint saved on cuda, loaded on cpu" $((SECONDS - t0)) "inspect --verify clean; cpu resumed from iteration 4"
  else
    record FAIL "checkpoint saved on cuda, loaded on cpu" $((SECONDS - t0)) "$(tail -2 "$work"/ckpt_*.log | tr '\n' ' ' | cut -c1-300)"
  fi
}

check_memory_preflight() {
  local t0=$SECONDS line free_mib
  if [ "$gpus" = 0 ]; then
    record SKIP "memory pre-flight vs cudaMemGetInfo" 0 "no CUDA device ($gpu_reason)"
    return
  fi
  bounded 60 "$work/preflight.log" "$kit/bin/megatron-app" --config "$checkout/configs/gpt_tiny.toml" \
    --log-level debug --set runtime.device=cuda --set training.train_iters=1 \
    --set training.eval_iters=0 --set checkpoint.save= --set "data.data_cache_path=$work/cache" || true
  line=$(grep -m1 "memory pre-flight: this rank needs" "$work/preflight.log" || true)
  free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
  if [ -n "$line" ] && echo "$line" | grep -q "cuda:0 free memory"; then
    record PASS "memory pre-flight vs cudaMemGetInfo" $((SECONDS - t0)) "${line#*pre-flight: }; nvidia-smi free ${free_mib:-?} MiB"
  else
    record FAIL "memory pre-flight vs cudaMemGetInfo" $((SECONDS - t0)) "no device budget in the log: ${line:-none}"
  fi
}

check_tensor_parallel() {
  local t0=$SECONDS
  if [ "$gpus" -lt 2 ]; then
    record SKIP "TP2 over NCCL vs one rank" 0 "$gpus CUDA device(s): TP2 over NCCL needs two"
    return
  fi
  if train_tiny gpt_tiny cuda 6 && mv "$work/gpt_tiny.cuda.losses" "$work/one.losses" &&
     bounded 180 "$work/tp2.log" mpirun --allow-run-as-root --oversubscribe -np 2 \
       "$kit/bin/megatron-app" --config "$checkout/configs/gpt_tiny.toml" --set runtime.device=cuda \
       --set parallel.tensor_model_parallel_size=2 --set training.train_iters=6 \
       --set training.lr_warmup_iters=0 \
       --set training.eval_iters=0 --set logging.log_interval=1 \
       --set "logging.metrics_file=$work/tp2.jsonl" --set checkpoint.save= \
       --set "data.data_cache_path=$work/cache" --set model.hidden_dropout=0 \
       --set model.attention_dropout=0 &&
     losses_of "$work/tp2.jsonl" > "$work/tp2.losses" &&
     losses_agree "$work/one.losses" "$work/tp2.losses" 2e-3; then
    record PASS "TP2 over NCCL vs one rank" $((SECONDS - t0)) "$(paste -sd' ' "$work/tp2.losses")"
  else
    record FAIL "TP2 over NCCL vs one rank" $((SECONDS - t0)) "$(tail -2 "$work/tp2.log" | tr '\n' ' ')"
  fi
}

# Where CUDA's and NCCL's libraries are on this machine: the toolkit, and PyTorch's NCCL wheel.
cuda_library_path() {
  local dirs=() d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
    [ -d "$d" ] && dirs+=("$d")
  done
  d=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
  [ -n "$d" ] && [ -d "$d" ] && dirs+=("$d")
  (IFS=:; echo "${dirs[*]}")
}

run() {
  local from=${1:-gpu-check.tar.xz}
  checkout=$(cd "$(dirname "$0")/.." && pwd)  # its configs and bundled data
  work=$(realpath -m "${GPU_CHECK_WORK:-gpu-check-work}")
  rm -rf "$work"
  mkdir -p "$work"
  if [ -d "$from" ]; then
    kit=$(realpath "$from")
  elif [ -f "$from" ]; then
    # xz, or Python's lzma where xz is not installed (a minimal Debian has neither zstd nor xz).
    if command -v xz > /dev/null; then
      xz -dc "$from" | tar -C "$work" -xf -
    elif command -v python3 > /dev/null; then
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$from" |
        tar -C "$work" -xf -
    else
      echo "gpu-check run: unpacking $from needs xz or python3" >&2
      exit 2
    fi
    kit=$work/megatron-gpu-check
  else
    echo "gpu-check run: no pack at '$from' (make one with: scripts/gpu-check.sh pack)" >&2
    exit 2
  fi
  summary=${GPU_CHECK_SUMMARY:-$PWD/gpu-check-summary.txt}
  : > "$summary"
  local deps=$kit/deps
  export LD_LIBRARY_PATH="$kit/lib:$deps/usr/lib/x86_64-linux-gnu:$deps/lib/x86_64-linux-gnu:$deps/usr/lib/x86_64-linux-gnu/openmpi/lib:$(cuda_library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # OpenMPI finds its components and help texts under its prefix, here the unpacked packages.
  export OPAL_PREFIX="$kit/deps/usr" PATH="$kit/deps/usr/bin:$PATH"
  export OMPI_MCA_plm_rsh_agent="" OMP_WAIT_POLICY=passive
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  gpu_reason="nvidia-smi lists none"
  command -v nvidia-smi >/dev/null || gpu_reason="no nvidia-smi"
  {
    echo "# megatron-app GPU checks, $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname)"
    echo "# GPUs: $gpus $( [ "$gpus" -gt 0 ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
    echo "# library path: $LD_LIBRARY_PATH"
  } | tee -a "$summary"
  local t0=$SECONDS
  if bounded 30 "$work/version.log" "$kit/bin/megatron-app" --version; then
    record PASS "megatron-app starts" $((SECONDS - t0)) "$(head -1 "$work/version.log")"
  else
    record FAIL "megatron-app starts" $((SECONDS - t0)) "$(tail -3 "$work/version.log" | tr '\n' ' ')"
  fi
  check_conformance
  check_training
  check_checkpoint
  check_memory_preflight
  check_tensor_parallel
  echo "# $failures failed; $((SECONDS - started)) s in all (limit $kTimeLimit s)" | tee -a "$summary"
  [ "$failures" = 0 ]
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
