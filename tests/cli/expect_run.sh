#!/usr/bin/env bash
# Runs a command and checks its exit code and output (stdout and stderr together).
# Usage: expect_run.sh EXIT_CODE [-n] PATTERN... -- COMMAND [ARGS...]
#   PATTERN is an extended regex that must occur; after -n, patterns that must NOT occur.
set -uo pipefail
expected=$1; shift
must=() must_not=() negate=0
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  if [ "$1" = "-n" ]; then negate=1; else
    if [ $negate = 1 ]; then must_not+=("$1"); else must+=("$1"); fi
  fi
  shift
done
[ "${1:-}" = "--" ] || { echo "expect_run.sh: missing -- before the command" >&2; exit 2; }
shift
out=$("$@" 2>&1)
code=$?
status=0
if [ "$code" != "$expected" ]; then
  echo "exit code $code, expected $expected" >&2; status=1
fi
for p in "${must[@]}"; do
  grep -qE -- "$p" <<< "$out" || { echo "output lacks /$p/" >&2; status=1; }
done
for p in "${must_not[@]}"; do
  grep -qE -- "$p" <<< "$out" && { echo "output has /$p/ but must not" >&2; status=1; }
done
if grep -qE "AddressSanitizer|runtime error:|Segmentation fault|core dumped|terminate called" <<< "$out"; then
  echo "the run crashed or tripped a sanitizer" >&2; status=1
fi
if [ $status != 0 ]; then
  echo "--- command: $*" >&2
  echo "--- output:" >&2
  echo "$out" >&2
fi
exit $status
