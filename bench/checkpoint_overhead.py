#!/usr/bin/python3
"""The checksums' overhead on checkpoint loads or saves, with its spread (bench/RESULTS.md).

Runs checkpoint_bench's checksummed and contiguous (no checksums) cases interleaved at random,
repetition by repetition, and prints the ratio of their median times with a 90% bootstrap
interval, the CPU times, and each repetition's time, so a run's noise is seen beside its result.
With --aa it also runs a second copy of the format without checksums in a file of its own
("plain_twin") and prints its ratio to the first the same way: an A/A comparison, the spread two
files of the same format show in the same run (the floor under which a difference means nothing).

  bench/checkpoint_overhead.py BENCH --case cold|warm|save --size 64|512 [--repetitions 24] [--aa]
"""
import argparse
import json
import random
import statistics
import subprocess


def ratio_line(label, first, against, second, rng):
    """'label x ms, against y ms: +z% (90% interval ...)': first's median time over second's."""
    ratio = statistics.median(first) / statistics.median(second) - 1
    boots = sorted(
        statistics.median(rng.choices(first, k=len(first))) /
        statistics.median(rng.choices(second, k=len(second))) - 1 for _ in range(4000))
    low, high = boots[len(boots) // 20], boots[len(boots) * 19 // 20]
    return (f"{label} {statistics.median(first):.1f} ms, {against} {statistics.median(second):.1f} "
            f"ms: {100 * ratio:+.1f}% (90% interval {100 * low:+.1f}..{100 * high:+.1f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", help="path to the checkpoint_bench binary")
    parser.add_argument("--case", choices=["cold", "warm", "save"], default="cold")
    parser.add_argument("--size", choices=["64", "512"], default="64")
    parser.add_argument("--repetitions", type=int, default=24)
    parser.add_argument("--aa", action="store_true",
                        help="also time plain_twin, a second file without checksums (A/A)")
    args = parser.parse_args()

    kinds = ["checksummed", "plain"] + (["plain_twin"] if args.aa else [])
    suffix = {"cold": "_cold", "warm": "", "save": ""}[args.case]
    group = "Save" if args.case == "save" else "Load"
    out = subprocess.run(
        [args.bench, f"--benchmark_filter=^{group}/({'|'.join(kinds)}){suffix}/{args.size}/",
         f"--benchmark_repetitions={args.repetitions}",
         "--benchmark_enable_random_interleaving=true", "--benchmark_format=json"],
        capture_output=True, text=True, check=True).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]

    def of(kind, key):
        # "Load/plain_cold/512/...": the case is the name's second part (plain_twin contains
        # plain, so no substring test).
        return [b[key] for b in runs if b["name"].split("/")[1] == kind + suffix]

    rng = random.Random(1)
    checked, plain = of("checksummed", "real_time"), of("plain", "real_time")
    twin = of("plain_twin", "real_time")  # empty without --aa
    print(f"{args.case} {args.size}: " +
          ratio_line("checksummed", checked, "without checksums", plain, rng) +
          f", CPU {statistics.median(of('checksummed', 'cpu_time')):.1f} / "
          f"{statistics.median(of('plain', 'cpu_time')):.1f} ms, n = {len(checked)} / {len(plain)}")
    if args.case != "save":
        print(f"  loading thread's CPU: "
              f"{statistics.median(of('checksummed', 'loading_thread_cpu_ms')):.1f} / "
              f"{statistics.median(of('plain', 'loading_thread_cpu_ms')):.1f} ms")
    if twin:
        print("  A/A: " + ratio_line("plain_twin", twin, "against", plain, rng))
    for label, times in (("checksummed:", checked), ("without:    ", plain), ("twin:       ", twin)):
        if times:
            print(" ", label, " ".join(f"{t:.1f}" for t in sorted(times)))


if __name__ == "__main__":
    main()
