#!/usr/bin/python3
"""The checksums' overhead on checkpoint loads or saves, with its spread (bench/RESULTS.md).

Runs checkpoint_bench's checksummed and contiguous (no checksums) cases interleaved at random,
repetition by repetition, and prints the ratio of their median times with a 90% bootstrap
interval, the CPU times, and each repetition's time, so a run's noise is seen beside its result.

  bench/checkpoint_overhead.py BENCH --case cold|warm|save --size 64|512 [--repetitions 24]
"""
import argparse
import json
import random
import statistics
import subprocess


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", help="path to the checkpoint_bench binary")
    parser.add_argument("--case", choices=["cold", "warm", "save"], default="cold")
    parser.add_argument("--size", choices=["64", "512"], default="64")
    parser.add_argument("--repetitions", type=int, default=24)
    args = parser.parse_args()

    group = {"cold": "Load/(checksummed|plain)_cold", "warm": "Load/(checksummed|plain)",
             "save": "Save/(checksummed|plain)"}[args.case]
    out = subprocess.run(
        [args.bench, f"--benchmark_filter={group}/{args.size}/",
         f"--benchmark_repetitions={args.repetitions}",
         "--benchmark_enable_random_interleaving=true", "--benchmark_format=json"],
        capture_output=True, text=True, check=True).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]

    def of(kind, key):
        return [b[key] for b in runs if kind in b["name"]]

    checked, plain = of("checksummed", "real_time"), of("plain", "real_time")
    ratio = statistics.median(checked) / statistics.median(plain) - 1
    rng = random.Random(1)
    boots = sorted(
        statistics.median(rng.choices(checked, k=len(checked))) /
        statistics.median(rng.choices(plain, k=len(plain))) - 1 for _ in range(4000))
    low, high = boots[len(boots) // 20], boots[len(boots) * 19 // 20]
    print(f"{args.case} {args.size}: checksummed {statistics.median(checked):.1f} ms, "
          f"without checksums {statistics.median(plain):.1f} ms: {100 * ratio:+.1f}% "
          f"(90% interval {100 * low:+.1f}..{100 * high:+.1f}), "
          f"CPU {statistics.median(of('checksummed', 'cpu_time')):.1f} / "
          f"{statistics.median(of('plain', 'cpu_time')):.1f} ms, n = {len(checked)} / {len(plain)}")
    if args.case != "save":
        print(f"  loading thread's CPU: "
              f"{statistics.median(of('checksummed', 'loading_thread_cpu_ms')):.1f} / "
              f"{statistics.median(of('plain', 'loading_thread_cpu_ms')):.1f} ms")
    print("  checksummed:", " ".join(f"{t:.1f}" for t in sorted(checked)))
    print("  without:    ", " ".join(f"{t:.1f}" for t in sorted(plain)))


if __name__ == "__main__":
    main()
