#!/usr/bin/python3
"""Compares two megatron-app task results files (JSON objects): the same keys, integers and
strings equal, floats within a relative 1e-5 (summation order changes with the tensor-parallel
split: per-token losses then differ in their last bits; a wrong shard or a dropped window moves a
metric by far more).

usage: compare_results.py EXPECTED.json ACTUAL.json
"""
import json
import sys

RTOL = 1e-5


def main(expected_path, actual_path):
    with open(expected_path, encoding="utf-8") as f:
        expected = json.load(f)
    with open(actual_path, encoding="utf-8") as f:
        actual = json.load(f)
    good = set(expected) == set(actual)
    if not good:
        print(f"FAIL keys differ: {sorted(expected)} vs {sorted(actual)}")
    for key in expected:
        want, got = expected[key], actual.get(key)
        if isinstance(want, float) and isinstance(got, (int, float)):
            ok = abs(got - want) <= RTOL * max(abs(want), abs(got))
        else:
            ok = want == got
        print(f"{'ok  ' if ok else 'FAIL'} {key}: {want!r} vs {got!r}")
        good &= ok
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
