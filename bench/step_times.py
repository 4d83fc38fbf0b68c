#!/usr/bin/python3
"""The step time of a megatron-app run from its metrics file (logging.metrics_file, one JSON line
per logged iteration), the first iteration left out as warm-up.

usage: step_times.py METRICS.jsonl TOKENS_PER_STEP [--per-iteration]
prints "X ms/step, Y tokens/s" and, with --per-iteration, each timed iteration's milliseconds.
"""
import json
import sys


def main(path, tokens_per_step, *flags):
    rows = [json.loads(line) for line in open(path) if '"train"' in line][1:]
    ms = sum(r["elapsed_ms"] for r in rows) / len(rows)
    text = f"{ms:.1f} ms/step, {float(tokens_per_step) / ms * 1000:.0f} tokens/s"
    if "--per-iteration" in flags:
        text += " (per iteration: " + ", ".join(f"{r['elapsed_ms']:.0f}" for r in rows) + ")"
    print(text)


if __name__ == "__main__":
    main(*sys.argv[1:])
