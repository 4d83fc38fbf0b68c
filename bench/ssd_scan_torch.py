#!/usr/bin/python3
"""PyTorch baseline for the Mamba-2 SSD chunked scan of one layer (CPU, float32): forward and
forward+backward (autograd) times at batch 1 for several sequence lengths.

The scan is MambaMixer's mamba_chunk_scan_combined(x, dt, A, B, C, chunk, D, dt_bias,
dt_softplus=True) without the gate: dt = softplus(dt + dt_bias), A = -exp(A_log), head h reads
the B/C group h // (H / G), y = SSM(x) + D * x. Algorithm: the SSD chunked form of the Mamba-2
paper (its "ssd_minimal"), written with batched matmuls: per chunk the quadratic form
(C B^T masked by the segment-sum decay matrix exp(cumsum_i - cumsum_j), times dt_j) applied to
x; each chunk's end state; the inter-chunk state passing (a sequential loop over chunks, linear
in S as in mamba_ssm's _state_passing_fwd; --state-passing quadratic uses ssd_minimal's
segment-sum matrix over chunks instead); each chunk's output from its incoming state.

Gradients are taken for every input (x, dt, A_log, B, C, D, dt_bias) against a fixed random
upstream gradient. Times are medians of --repeats calls after a warm-up (wall clock, and
process CPU time as *_cpu_ms); "forward" runs under torch.no_grad(). The per-chunk steps run on
--block chunks at a time (default 16): one batch of all chunks makes (chunk x chunk) temporaries
of 64 MiB at S = 16384, and their page faults cost more than the arithmetic.

Usage: /usr/bin/python3 bench/ssd_scan_torch.py [--threads 1] [--seqs 1024 4096 16384]
           [--heads 8] [--head-dim 64] [--state 128] [--groups 1] [--chunk 128] [--repeats 5]
           [--block 16] [--state-passing sequential|quadratic]
       /usr/bin/python3 bench/ssd_scan_torch.py --check   (float64 check against the recurrence)
Prints one JSON line per sequence length.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time


def _threads_from_argv(default=1):
    for i, arg in enumerate(sys.argv):
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
        if arg == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return str(default)


# Debian's torch calls OpenBLAS (the pthread build) for its matmuls, and torch.set_num_threads
# does not reach it: left alone it runs every GEMM on all cores whatever --threads says. torch's
# bmm already spreads the batch over its own --threads OpenMP threads and calls OpenBLAS inside
# them, so OpenBLAS gets one thread (measured at --threads 2, S 16384, fwd+bwd: OpenMP 2 /
# OpenBLAS 1 418 ms, 1 / 2 478 ms, 2 / 2 810 ms oversubscribed; 1 / 1 572 ms).
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = _threads_from_argv()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)


def ssd_scan(x, dt, A_log, B, C, D, dt_bias, chunk, state_passing="sequential", block=16):
    """x (b, S, H, P), dt (b, S, H) before softplus, A_log/D/dt_bias (H,), B/C (b, S, G, N).
    Returns y (b, S, H, P). The per-chunk work runs on blocks of `block` chunks at a time so
    that its (chunk x chunk) temporaries stay a few MiB whatever S is."""
    b, s, nh, p = x.shape
    g, n = B.shape[2], B.shape[3]
    k = nh // g                                        # heads per group
    dt = F.softplus(dt + dt_bias)
    A = -torch.exp(A_log)
    pad = (-s) % chunk                                 # dt = 0, x = 0 past the end: no effect
    if pad:
        x_p = F.pad(x, (0, 0, 0, 0, 0, pad))
        dt = F.pad(dt, (0, 0, 0, pad))
        B = F.pad(B, (0, 0, 0, 0, 0, pad))
        C = F.pad(C, (0, 0, 0, 0, 0, pad))
    else:
        x_p = x
    c, l = (s + pad) // chunk, chunk
    # layouts with heads split as (group, head in group) so B/C broadcast over k
    xc = x_p.reshape(b, c, l, g, k, p).permute(0, 1, 3, 4, 2, 5)      # (b, c, g, k, l, p)
    dtc = dt.reshape(b, c, l, g, k).permute(0, 1, 3, 4, 2)            # (b, c, g, k, l)
    Bc = B.reshape(b, c, l, g, n).transpose(2, 3).unsqueeze(3)         # (b, c, g, 1, l, n)
    Cc = C.reshape(b, c, l, g, n).transpose(2, 3).unsqueeze(3)         # (b, c, g, 1, l, n)
    dA_cs = torch.cumsum(dtc * A.reshape(g, k, 1), dim=-1)            # (b, c, g, k, l)
    causal = torch.ones(l, l, dtype=torch.bool).tril()
    # split (not index) along the chunks: one backward concatenation instead of a full-size
    # zero-filled gradient per slice
    blocks = lambda t: t.split(block, dim=1)

    y_diag, states = [], []
    for xb, dtb, Bb, Cb, csb in zip(*map(blocks, (xc, dtc, Bc, Cc, dA_cs))):
        # 1. within each chunk: y_i = sum_{j <= i} (C_i . B_j) exp(cs_i - cs_j) dt_j x_j
        seg = (csb.unsqueeze(-1) - csb.unsqueeze(-2)).masked_fill(~causal, float("-inf"))
        cb = Cb @ Bb.transpose(-1, -2)                                  # (b, cb, g, 1, l, l)
        y_diag.append((cb * torch.exp(seg) * dtb.unsqueeze(-2)) @ xb)  # (b, cb, g, k, l, p)
        # 2. each chunk's end state from its own inputs: sum_j exp(cs_last - cs_j) dt_j x_j B_j^T
        w = torch.exp(csb[..., -1:] - csb) * dtb                        # (b, cb, g, k, l)
        states.append((xb * w.unsqueeze(-1)).transpose(-1, -2) @ Bb)  # (b, cb, g, k, p, n)
    states = torch.cat(states, dim=1)                                   # (b, c, g, k, p, n)

    # 3. state passing: the state entering each chunk
    chunk_decay = torch.exp(dA_cs[..., -1])                             # (b, c, g, k)
    if state_passing == "sequential":
        # unbind once: indexing states[:, i] in the loop would make each step's backward
        # materialise (and add) a zero-filled gradient of the whole tensor, quadratic in S
        per_chunk, decays = states.unbind(1), chunk_decay[..., None, None].unbind(1)
        prev = torch.zeros_like(per_chunk[0])
        incoming = []
        for i in range(c):
            incoming.append(prev)
            prev = decays[i] * prev + per_chunk[i]
        incoming = torch.stack(incoming, dim=1)                         # (b, c, g, k, p, n)
    else:
        # ssd_minimal: exp(segsum) over the chunk totals, a (c+1) x (c+1) decay matrix
        tot = F.pad(dA_cs[..., -1].permute(0, 2, 3, 1), (1, 0))         # (b, g, k, c+1)
        tcs = torch.cumsum(tot, dim=-1)
        cmask = torch.ones(c + 1, c + 1, dtype=torch.bool).tril()
        dmat = torch.exp((tcs.unsqueeze(-1) - tcs.unsqueeze(-2)).masked_fill(~cmask, float("-inf")))
        st = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)  # (b, c+1, g, k, p, n)
        st = st.permute(0, 2, 3, 1, 4, 5).reshape(b, g, k, c + 1, p * n)
        incoming = (dmat @ st)[:, :, :, :-1].reshape(b, g, k, c, p, n).permute(0, 3, 1, 2, 4, 5)

    # 4. each position's output from the incoming state: exp(cs_i) C_i . h_in
    y = torch.cat([yb + (Cb @ ib.transpose(-1, -2)) * torch.exp(csb).unsqueeze(-1)
                   for yb, Cb, ib, csb in zip(y_diag, *map(blocks, (Cc, incoming, dA_cs)))],
                  dim=1)
    y = y.permute(0, 1, 4, 2, 3, 5).reshape(b, c * l, nh, p)[:, :s]
    return y + D[:, None] * x


def recurrence(x, dt, A_log, B, C, D, dt_bias):
    """The plain Mamba-2 recurrence, for --check."""
    b, s, nh, p = x.shape
    g = B.shape[2]
    dt = F.softplus(dt + dt_bias)
    A = -torch.exp(A_log)
    Bh, Ch = B.repeat_interleave(nh // g, dim=2), C.repeat_interleave(nh // g, dim=2)
    state = x.new_zeros(b, nh, p, B.shape[3])
    ys = []
    for t in range(s):
        state = (torch.exp(dt[:, t] * A)[..., None, None] * state
                 + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :])
        ys.append(torch.einsum("bhpn,bhn->bhp", state, Ch[:, t]) + D[:, None] * x[:, t])
    return torch.stack(ys, dim=1)


def make_inputs(seq, heads, head_dim, state, groups, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=gen, dtype=dtype)
    x = r(1, seq, heads, head_dim)
    dt = r(1, seq, heads)
    A_log = torch.log(1 + 15 * torch.rand(heads, generator=gen, dtype=dtype))    # A in [1, 16]
    dt0 = torch.exp(torch.rand(heads, generator=gen, dtype=dtype)
                    * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    dt_bias = dt0 + torch.log(-torch.expm1(-dt0))       # softplus(dt_bias) in [1e-3, 0.1]
    B = r(1, seq, groups, state) / math.sqrt(state)
    C = r(1, seq, groups, state) / math.sqrt(state)
    D = torch.ones(heads, dtype=dtype)
    dout = r(1, seq, heads, head_dim)
    return [x, dt, A_log, B, C, D, dt_bias], dout


def time_ms(fn, repeats):
    """Median wall-clock and process-CPU milliseconds per call after a warm-up of at least two
    calls and 0.5 s (the allocator's heap must grow first; a single warm-up call left the first
    sequence length up to 3x slow). CPU time is what a shared machine distorts least; with one
    thread it is the work itself."""
    start, calls = time.perf_counter(), 0
    while calls < 2 or time.perf_counter() - start < 0.5:
        fn()
        calls += 1
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def check(args):
    """float64: the chunked scan (both state passings) against the recurrence, values and
    gradients, at a length that is not a multiple of the chunk."""
    ok = True
    for heads, groups in ((4, 1), (4, 2)):
        inputs, dout = make_inputs(300, heads, 8, 16, groups, torch.float64, seed=1)
        inputs[5] = torch.zeros_like(inputs[5])          # D = 0: y is the SSM part alone
        ref_in = [t.clone().requires_grad_(True) for t in inputs]
        y_ref = recurrence(*ref_in)
        y_ref.backward(dout)
        # how much the state entering a chunk matters (restart the recurrence every 64 steps)
        with torch.no_grad():
            restarted = torch.cat([recurrence(inputs[0][:, i:i + 64], inputs[1][:, i:i + 64],
                                              inputs[2], inputs[3][:, i:i + 64],
                                              inputs[4][:, i:i + 64], inputs[5], inputs[6])
                                   for i in range(0, 300, 64)], dim=1)
        carry = ((y_ref - restarted).abs().max() / y_ref.abs().max()).item()
        for mode, block in (("sequential", 16), ("sequential", 2), ("quadratic", 2)):
            leaves = [t.clone().requires_grad_(True) for t in inputs]
            y = ssd_scan(*leaves, 64, mode, block)   # 5 chunks, the last one partial
            y.backward(dout)
            err = ((y - y_ref).abs().max() / y_ref.abs().max()).item()
            gerr = max(((a.grad - r.grad).abs().max() / r.grad.abs().max()).item()
                       for a, r in zip(leaves, ref_in))
            good = err < 1e-10 and gerr < 1e-10 and carry > 1e-2
            ok &= good
            print(json.dumps({"check": mode, "block": block, "heads": heads, "groups": groups,
                              "seq": 300, "chunk": 64, "state_carry_rel": round(carry, 3),
                              "y_rel_err": err, "grad_rel_err": gerr, "ok": good}))
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seqs", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--state", type=int, default=128)
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--state-passing", choices=("sequential", "quadratic"),
                        default="sequential")
    parser.add_argument("--block", type=int, default=16,
                        help="chunks processed together by the per-chunk steps")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.check:
        raise SystemExit(0 if check(args) else 1)
    if args.heads % args.groups:
        raise SystemExit("--heads must be a multiple of --groups")

    for seq in args.seqs:
        inputs, dout = make_inputs(seq, args.heads, args.head_dim, args.state, args.groups)
        for t in inputs:
            t.requires_grad_(True)

        def forward():
            with torch.no_grad():
                ssd_scan(*inputs, args.chunk, args.state_passing, args.block)

        def forward_backward():
            for t in inputs:
                t.grad = None
            ssd_scan(*inputs, args.chunk, args.state_passing, args.block).backward(dout)

        fwd, fwd_cpu = time_ms(forward, args.repeats)
        fwd_bwd, fwd_bwd_cpu = time_ms(forward_backward, args.repeats)
        print(json.dumps({"impl": "torch_ssd_chunked", "seq": seq,
                          "forward_ms": round(fwd, 2), "fwd_bwd_ms": round(fwd_bwd, 2),
                          "tokens_per_s_fwd_bwd": round(seq / (fwd_bwd * 1e-3), 1),
                          "forward_cpu_ms": round(fwd_cpu, 2),
                          "fwd_bwd_cpu_ms": round(fwd_bwd_cpu, 2),
                          "batch": 1, "heads": args.heads, "head_dim": args.head_dim,
                          "state": args.state, "groups": args.groups, "chunk": args.chunk,
                          "block": args.block, "state_passing": args.state_passing,
                          "threads": args.threads, "repeats": args.repeats,
                          "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
