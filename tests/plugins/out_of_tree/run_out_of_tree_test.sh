#!/usr/bin/env bash
# Installs megatron-app into a temporary prefix, builds a plugin outside the tree against that
# install with find_package(megatron), drops the .so into a directory and runs it with the
# installed host, which was never rebuilt. Usage: run_out_of_tree_test.sh BUILD_DIR SRC WORK MPIEXEC
set -euo pipefail
build_dir=$1 src=$2 work=$3 mpiexec=${4:-mpirun}
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"

fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {  # expect FILE PATTERN
  grep -qE -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; fail "output lacks /$2/"; }
}

echo "== install into $prefix"
cmake --install "$build_dir" --prefix "$prefix" > "$work/install.log"
[ -x "$prefix/bin/megatron-app" ] || fail "no installed host"
ls "$prefix"/lib/libmegatron_core.so* > /dev/null || fail "no installed core library"
[ -f "$prefix/include/megatron/plugin.h" ] || fail "no installed SDK headers"
host_before=$(md5sum "$prefix/bin/megatron-app" | cut -d' ' -f1)

echo "== build the plugin out of tree"
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$src" -B "$work/plugin-build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$work/plugin-configure.log"
cmake --build "$work/plugin-build" > "$work/plugin-build.log"
mkdir -p "$work/dropin"
cp "$work/plugin-build/librank_sum.so" "$work/dropin/"

echo "== the installed host lists it (MEGATRON_PLUGIN_PATH) beside the installed built-ins"
MEGATRON_PLUGIN_PATH="$work/dropin" "$prefix/bin/megatron-app" plugins > "$work/plugins.out" 2>&1 \
  || { cat "$work/plugins.out"; fail "plugins exited non-zero"; }
expect "$work/plugins.out" "task +rank_sum +2\.1\.0 +7\.0 +.*dropin/librank_sum\.so"
expect "$work/plugins.out" "task +collectives .*lib/megatron/plugins/"

echo "== and runs it, found through [plugins] paths"
cat > "$work/rank_sum.toml" <<TOML
[plugins]
paths = ["dropin"]
[task]
type = "rank_sum"
factor = 2.5
TOML
"$prefix/bin/megatron-app" --config "$work/rank_sum.toml" > "$work/run1.out" 2>&1 \
  || { cat "$work/run1.out"; fail "single-rank run failed"; }
expect "$work/run1.out" "task rank_sum \| rank_sum: 2\.5$"

echo "== on two ranks under mpirun"
# Open MPI leaks start-up allocations of modules it unloads; LSan cannot attribute them.
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 "$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$prefix/bin/megatron-app" \
  --config "$work/rank_sum.toml" > "$work/run2.out" 2>&1 \
  || { cat "$work/run2.out"; fail "two-rank run failed"; }
expect "$work/run2.out" "\[rank 0/2\].*task rank_sum \| rank_sum: 7\.5$"
expect "$work/run2.out" "\[rank 1/2\].*task rank_sum \| world_size: 2$"

echo "== its config table is validated by its own schema"
if "$prefix/bin/megatron-app" --config "$work/rank_sum.toml" --set task.factor=-1 > "$work/bad.out" 2>&1; then
  fail "a negative factor was accepted"
fi
expect "$work/bad.out" "task\.factor: value -1\.0 is out of range: must be > 0"

[ "$(md5sum "$prefix/bin/megatron-app" | cut -d' ' -f1)" = "$host_before" ] || fail "host changed"
echo "PASS: out-of-tree plugin built against the installed SDK and run by the installed host"
