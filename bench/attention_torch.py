#!/usr/bin/python3
"""PyTorch baseline for bench/attention_bench.cpp: torch's CPU "math" attention (q @ k^T, causal
masked softmax, @ v; backward through autograd) at the same shape, B=1, S=1024, H=12, D=64, f32,
and its peak extra resident memory for S = 1024, 2048, 4096 (one child process per S).

FLOPs are counted as in attention_bench.cpp: only causally visible (query, key) pairs,
S (S + 1) / 2 per head, 4 D per pair forward and 8 D backward (torch itself computes all S^2).

Usage: /usr/bin/python3 bench/attention_torch.py [--threads 2] [--repeats 20] [--no-memory]
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import torch


def make_inputs(batch, seq, heads, dim, requires_grad=True):
    gen = torch.Generator().manual_seed(0)
    shape = (batch, heads, seq, dim)
    q, k, v, dout = (torch.rand(shape, generator=gen) * 2 - 1 for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(requires_grad)
    return q, k, v, dout


def math_attention(q, k, v, mask, scale):
    scores = (q @ k.transpose(-2, -1)) * scale
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def causal_mask(seq):
    return torch.ones(seq, seq, dtype=torch.bool).triu(1)


def time_ms(fn, repeats):
    """Median wall-clock and process-CPU milliseconds per call (CPU time is what a shared machine
    distorts least; with one thread it is the work itself)."""
    fn()  # warm up
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def speed(args):
    batch, seq, heads, dim = 1, 1024, 12, 64
    q, k, v, dout = make_inputs(batch, seq, heads, dim)
    mask, scale = causal_mask(seq), dim ** -0.5
    pairs = batch * heads * seq * (seq + 1) / 2

    def forward():
        with torch.no_grad():
            math_attention(q, k, v, mask, scale)

    def forward_backward():
        for t in (q, k, v):
            t.grad = None
        math_attention(q, k, v, mask, scale).backward(dout)

    saved = {}

    def backward_only():  # the forward graph is rebuilt outside the timed region each time
        saved["out"].backward(dout, retain_graph=True)

    saved["out"] = math_attention(q, k, v, mask, scale)
    results = {}
    for name, fn, flops_per_pair in (("forward", forward, 4 * dim),
                                     ("backward", backward_only, 8 * dim),
                                     ("forward+backward", forward_backward, 12 * dim)):
        wall, cpu = time_ms(fn, args.repeats)
        flops = flops_per_pair * pairs
        results[name] = {"wall_ms": round(wall, 2), "cpu_ms": round(cpu, 2),
                         "GFLOP/s (wall)": round(flops / (wall * 1e-3) / 1e9, 1),
                         "GFLOP/s (cpu)": round(flops / (cpu * 1e-3) / 1e9, 1)}
    return results


def peak_memory_child(seq):
    """Runs in a child: peak RSS growth (MiB) of one forward+backward at this S."""
    q, k, v, dout = make_inputs(1, seq, 12, 64)
    mask, scale = causal_mask(seq), 64 ** -0.5

    def rss(key):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    before = rss("VmRSS")
    math_attention(q, k, v, mask, scale).backward(dout)
    return (rss("VmHWM") - before) / 2**20


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_child:
        print(json.dumps(peak_memory_child(args.memory_child)))
        return
    report = {"torch": torch.__version__, "threads": torch.get_num_threads(),
              "shape": "B=1 S=1024 H=12 D=64 causal f32", "speed": speed(args)}
    if not args.no_memory:
        report["extra_peak_MiB"] = {}
        for seq in (1024, 2048, 4096):
            child = subprocess.run([sys.executable, __file__, "--threads", str(args.threads),
                                    "--memory-child", str(seq)],
                                   check=True, capture_output=True, text=True)
            report["extra_peak_MiB"][seq] = round(json.loads(child.stdout), 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
