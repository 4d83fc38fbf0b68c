#!/usr/bin/python3
"""Independent PyTorch Mamba-2 / hybrid model (Megatron-core semantics) checked against
megatron-app.

usage: mamba_reference.py DUMP_FILE VARIANT
       mamba_reference.py --self-test

DUMP_FILE: the Mamba reference dump (initial weights under model/, and under reference/ a random
batch: tokens, labels, loss_mask, our loss and every parameter gradient). VARIANT: a (pure Mamba,
pattern "MM") or b (hybrid, pattern "M*-M"). The loss and every gradient are recomputed here in
float64 with autograd. --self-test checks the step-by-step SSM recurrence used here against an
independent chunked SSD formulation (no dump needed) and runs both variants on random weights.

Written from Megatron-LM core_v0.13.0's definitions (models/mamba/mamba_model.py,
models/mamba/mamba_layer_specs.py, ssm/mamba_block.py, ssm/mamba_layer.py, ssm/mamba_mixer.py,
ssm/mamba_hybrid_layer_allocation.py, ssm/mlp_layer.py, transformer/attention.py,
transformer/mlp.py, transformer/transformer_layer.py, pretrain_mamba.py) and mamba_ssm's
RMSNormGated (ops/triton/layernorm_gated.py, rms_norm_ref), not from the C++ code:
- MambaModel: word embedding, no position embedding (position_embedding_type 'none'), the
  MambaStack, final_norm (TENorm, RMSNorm here), untied output_layer without bias, logits over
  the whole padded vocabulary;
- MambaStack: layer i is built from hybrid_override_pattern[i] (allocate_layers): 'M' MambaLayer,
  '*' TransformerLayer with only causal self-attention, '-' MLPLayer (a TransformerLayer with only
  the MLP). Each is one pre-norm residual: x = x + mixer(norm(x)), the norm fused into the first
  linear (TELayerNormColumnParallelLinear, hence `layer_norm_weight`); MambaLayer's own `norm` is
  IdentityOp in mamba_stack_spec. No dropout;
- MambaMixer (the use_mamba_mem_eff_path=False branch of forward; the default fused path,
  mamba_split_conv1d_scan_combined then self.norm(y) without z, computes the same function):
  zxBCdt = in_proj(x) split [z (d_inner), xBC (d_inner + 2 G N), dt (H)]; xBC =
  silu(depthwise Conv1d(padding d_conv-1)(xBC)[..., :S] + its bias folded in); split [x, B, C];
  A = -exp(A_log); dt = softplus(dt + dt_bias); head h reads B/C group h // (H / G); then the SSM
  per (batch, head): h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T, y_t = h_t C_t + D x_t,
  h_{-1} = 0, computed here as the plain step-by-step recurrence (an independent check of a
  chunked scan); gated RMSNorm (RMSNormGated, norm_before_gate=False, group_size d_inner / G,
  eps 1e-5, no bias): u = y * silu(z), u * rsqrt(mean(u^2 over each group of d_inner / G
  consecutive channels) + eps) * norm.weight; out_proj;
- attention layer: linear_qkv rows per query group [its np/ng query heads | key | value]
  (SelfAttention.get_query_key_value_tensors), query head h uses group h // (np / ng), causal
  softmax(q k^T / sqrt(kv_channels)) (TEDotProductAttention's default scale), linear_proj;
- MLP layer: linear_fc1, F.gelu (exact erf: --disable-bias-linear turns bias_gelu_fusion off in
  arguments.py, so MLP.forward applies config.activation_func = F.gelu), linear_fc2;
- loss: pretrain_mamba.loss_func, sum(cross_entropy * loss_mask), divided by
  sum(loss_mask) (the schedule's division by num_tokens; one micro-batch).
"""
import math
import os
import sys

# Debian's torch runs its matmuls in OpenBLAS (pthread build), which torch.set_num_threads does
# not limit: keep it to one thread on the shared cores too.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

import h5py  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpt_reference import check, load_tensors  # noqa: E402

torch.set_num_threads(1)  # gpt_reference sets 2 when imported
# Tolerances: those of gpt_reference.py (fp32 on our side, fp64 here; summation orders differ).
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4     # relative to each tensor's largest gradient
SELF_TEST_ATOL = 1e-10


class Config:
    """The reference configuration (hard-coded; the dump's shapes are checked against it)."""

    def __init__(self, variant):
        if variant not in ("a", "b"):
            raise SystemExit(f"mamba_reference.py: unknown variant '{variant}' (a or b)")
        self.variant = variant
        self.pattern = {"a": "MM", "b": "M*-M"}[variant]
        self.layers = len(self.pattern)
        self.h = 64
        self.vocab = 1024          # padded vocabulary
        self.batch = 2
        self.seq = 40
        self.eps = 1e-5            # RMSNorm everywhere
        # Mamba mixer
        self.expand = 2
        self.d_inner = self.expand * self.h      # 128
        self.headdim = 16                        # P
        self.nheads = self.d_inner // self.headdim  # H = 8
        self.d_state = 16                        # N
        self.ngroups = 2                         # G
        self.d_conv = 4
        self.norm_eps = 1e-5                     # ExtendedRMSNorm's eps
        self.conv_dim = self.d_inner + 2 * self.ngroups * self.d_state       # 192
        self.in_proj_dim = 2 * self.d_inner + 2 * self.ngroups * self.d_state + self.nheads  # 328
        # attention
        self.np = 4
        self.ng = 2
        self.hn = 16
        # MLP
        self.ffn = 128


def layer_shapes(cfg, kind, prefix):
    h = cfg.h
    if kind == "M":
        shapes = {
            "mixer.in_proj.layer_norm_weight": (h,),
            "mixer.in_proj.weight": (cfg.in_proj_dim, h),
            "mixer.conv1d.weight": (cfg.conv_dim, 1, cfg.d_conv),
            "mixer.conv1d.bias": (cfg.conv_dim,),
            "mixer.A_log": (cfg.nheads,),
            "mixer.D": (cfg.nheads,),
            "mixer.dt_bias": (cfg.nheads,),
            "mixer.norm.weight": (cfg.d_inner,),
            "mixer.out_proj.weight": (h, cfg.d_inner),
        }
    elif kind == "*":
        shapes = {
            "self_attention.linear_qkv.layer_norm_weight": (h,),
            "self_attention.linear_qkv.weight": ((cfg.np + 2 * cfg.ng) * cfg.hn, h),
            "self_attention.linear_proj.weight": (h, cfg.np * cfg.hn),
        }
    else:
        shapes = {
            "mlp.linear_fc1.layer_norm_weight": (h,),
            "mlp.linear_fc1.weight": (cfg.ffn, h),
            "mlp.linear_fc2.weight": (h, cfg.ffn),
        }
    return {prefix + k: v for k, v in shapes.items()}


def expected_shapes(cfg):
    """Every parameter of MambaModel with this config, in module order, with its shape."""
    shapes = {"embedding.word_embeddings.weight": (cfg.vocab, cfg.h)}
    for i, kind in enumerate(cfg.pattern):
        shapes.update(layer_shapes(cfg, kind, f"decoder.layers.{i}."))
    shapes["decoder.final_norm.weight"] = (cfg.h,)
    shapes["output_layer.weight"] = (cfg.vocab, cfg.h)
    return shapes


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


# ---------------------------------------------------------------------------------------------
# The SSM scan. Shapes: x (b, S, H, P), dt (b, S, H) after softplus, A (H,) negative,
# B and C (b, S, G, N), D (H,). Returns y (b, S, H, P).

def ssm_recurrence(x, dt, A, B, C, D):
    """The Mamba-2 recurrence, one time step after the other."""
    b, s, nh, p = x.shape
    g, n = B.shape[2], B.shape[3]
    Bh = B.repeat_interleave(nh // g, dim=2)   # (b, S, H, N): head h reads group h // (H / G)
    Ch = C.repeat_interleave(nh // g, dim=2)
    state = x.new_zeros(b, nh, p, n)
    ys = []
    for t in range(s):
        decay = torch.exp(dt[:, t] * A)                                    # (b, H)
        update = (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]  # (b, H, P, N)
        state = decay[:, :, None, None] * state + update
        y = torch.einsum("bhpn,bhn->bhp", state, Ch[:, t]) + D[:, None] * x[:, t]
        ys.append(y)
    return torch.stack(ys, dim=1)


def segsum(a):
    """a (..., T) -> (..., T, T): out[i, j] = a[j+1] + ... + a[i] for i >= j, -inf above the
    diagonal (the Mamba-2 paper's stable segment sum: a cumulative sum of a masked copy)."""
    t = a.shape[-1]
    rep = a[..., None, :].expand(*a.shape, t).transpose(-1, -2)   # rep[..., i, j] = a[i]
    strict = torch.tril(torch.ones(t, t, dtype=torch.bool), diagonal=-1)
    rep = rep.masked_fill(~strict, 0)
    out = torch.cumsum(rep, dim=-2)                 # out[i, j] = sum_{j < k <= i} a[k]
    return out.masked_fill(~torch.tril(torch.ones(t, t, dtype=torch.bool)), float("-inf"))


def ssd_chunked(x, dt, A, B, C, D, chunk):
    """The SSD chunked algorithm ("ssd_minimal" of the Mamba-2 paper): quadratic attention-like
    form inside each chunk, per-chunk end states, state passing between chunks (segment sums of
    the chunk totals), and each chunk's contribution of the incoming state. The sequence is
    padded with dt = 0, x = 0 up to a multiple of the chunk (no effect on earlier positions)."""
    b, s, nh, p = x.shape
    g, n = B.shape[2], B.shape[3]
    pad = (-s) % chunk
    Bh = B.repeat_interleave(nh // g, dim=2)
    Ch = C.repeat_interleave(nh // g, dim=2)
    X = F.pad(x * dt[..., None], (0, 0, 0, 0, 0, pad))              # discretised input
    dA = F.pad(dt * A, (0, 0, 0, pad))                              # (b, S', H)
    Bh = F.pad(Bh, (0, 0, 0, 0, 0, pad))
    Ch = F.pad(Ch, (0, 0, 0, 0, 0, pad))
    c = (s + pad) // chunk
    X = X.reshape(b, c, chunk, nh, p)
    Bh = Bh.reshape(b, c, chunk, nh, n)
    Ch = Ch.reshape(b, c, chunk, nh, n)
    dA = dA.reshape(b, c, chunk, nh).permute(0, 3, 1, 2)            # (b, H, c, l)
    dA_cs = torch.cumsum(dA, dim=-1)
    # 1. within each chunk
    L = torch.exp(segsum(dA))                                       # (b, H, c, l, s)
    y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Ch, Bh, L, X)
    # 2. each chunk's end state from its own inputs
    decay_states = torch.exp(dA_cs[..., -1:] - dA_cs)               # (b, H, c, l)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bh, decay_states, X)
    # 3. state passing: the state entering chunk z = sum over chunks c < z of decayed end states
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)   # (b, c+1, H, P, N)
    decay_chunk = torch.exp(segsum(F.pad(dA_cs[..., -1], (1, 0))))        # (b, H, c+1, c+1)
    states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)[:, :-1]
    # 4. the incoming state's contribution to each position
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", Ch, states, torch.exp(dA_cs))
    y = (y_diag + y_off).reshape(b, c * chunk, nh, p)[:, :s]
    return y + D[:, None] * x


# ---------------------------------------------------------------------------------------------
# The model. Activations (b, S, h).

def mamba_mixer(x, W, p, cfg, scan=ssm_recurrence):
    b, s, _ = x.shape
    g = lambda n: W[p + n]
    zxbcdt = F.linear(rms_norm(x, g("in_proj.layer_norm_weight"), cfg.eps), g("in_proj.weight"))
    z, xbc, dt = torch.split(zxbcdt, [cfg.d_inner, cfg.conv_dim, cfg.nheads], dim=-1)
    xbc = F.conv1d(xbc.transpose(1, 2), g("conv1d.weight"), g("conv1d.bias"),
                   padding=cfg.d_conv - 1, groups=cfg.conv_dim)[..., :s]
    xbc = F.silu(xbc).transpose(1, 2)
    xs, B, C = torch.split(xbc, [cfg.d_inner, cfg.ngroups * cfg.d_state,
                                 cfg.ngroups * cfg.d_state], dim=-1)
    xs = xs.reshape(b, s, cfg.nheads, cfg.headdim)
    B = B.reshape(b, s, cfg.ngroups, cfg.d_state)
    C = C.reshape(b, s, cfg.ngroups, cfg.d_state)
    A = -torch.exp(g("A_log"))
    dt = F.softplus(dt + g("dt_bias"))
    y = scan(xs, dt, A, B, C, g("D")).reshape(b, s, cfg.d_inner)
    # RMSNormGated(norm_before_gate=False, group_size=d_inner / ngroups)
    u = y * F.silu(z)
    ug = u.reshape(b, s, cfg.ngroups, cfg.d_inner // cfg.ngroups)
    ug = ug * torch.rsqrt(ug.pow(2).mean(-1, keepdim=True) + cfg.norm_eps)
    u = ug.reshape(b, s, cfg.d_inner) * g("norm.weight")
    return F.linear(u, g("out_proj.weight"))


def self_attention(x, W, p, cfg):
    b, s, _ = x.shape
    r = cfg.np // cfg.ng
    ln = rms_norm(x, W[p + "self_attention.linear_qkv.layer_norm_weight"], cfg.eps)
    qkv = F.linear(ln, W[p + "self_attention.linear_qkv.weight"])
    qkv = qkv.view(b, s, cfg.ng, r + 2, cfg.hn)     # per query group: r queries, a key, a value
    q = qkv[:, :, :, :r].reshape(b, s, cfg.np, cfg.hn)
    k = qkv[:, :, :, r].repeat_interleave(r, dim=2)  # query head h uses group h // r
    v = qkv[:, :, :, r + 1].repeat_interleave(r, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(cfg.hn)
    causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
    probs = scores.masked_fill(causal, float("-inf")).softmax(-1)
    ctx = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, cfg.np * cfg.hn)
    return F.linear(ctx, W[p + "self_attention.linear_proj.weight"])


def mlp(x, W, p, cfg):
    ln = rms_norm(x, W[p + "mlp.linear_fc1.layer_norm_weight"], cfg.eps)
    return F.linear(F.gelu(F.linear(ln, W[p + "mlp.linear_fc1.weight"])),
                    W[p + "mlp.linear_fc2.weight"])


def forward(W, tokens, cfg, scan=ssm_recurrence):
    """MambaModel.forward up to the logits (b, S, V)."""
    x = W["embedding.word_embeddings.weight"][tokens]
    for i, kind in enumerate(cfg.pattern):
        p = f"decoder.layers.{i}."
        if kind == "M":
            x = x + mamba_mixer(x, W, p + "mixer.", cfg, scan)
        elif kind == "*":
            x = x + self_attention(x, W, p, cfg)
        else:
            x = x + mlp(x, W, p, cfg)
    x = rms_norm(x, W["decoder.final_norm.weight"], cfg.eps)
    return x @ W["output_layer.weight"].t()


def masked_loss(logits, labels, loss_mask):
    """pretrain_mamba.loss_func over one micro-batch. Labels outside the loss mask may be
    anything (clamped: any target gives the same masked sum)."""
    per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                labels.reshape(-1).long().clamp(0, logits.shape[-1] - 1),
                                reduction="none")
    mask = loss_mask.reshape(-1).to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum()


# ---------------------------------------------------------------------------------------------

def check_inputs(W0, ref, cfg):
    """Parameter names and shapes, gradient names and shapes, batch. Returns ok."""
    good = True
    shapes = expected_shapes(cfg)
    missing = [n for n in shapes if n not in W0]
    extra = sorted(n for n in W0 if n not in shapes)
    good &= check("parameter names", not missing and not extra,
                  f"pattern {cfg.pattern}: {len(shapes)} expected, {len(W0)} in the dump"
                  + (f"; missing from the dump: {missing}" if missing else "")
                  + (f"; not in the model: {extra}" if extra else ""))
    wrong = [f"{n} {tuple(W0[n].shape)} (expected {s})" for n, s in shapes.items()
             if n in W0 and tuple(W0[n].shape) != s]
    good &= check("parameter shapes", not wrong, "as the configuration"
                  + (f"; differ: {wrong}" if wrong else ""))
    no_grad = [n for n in shapes if f"grad/{n}" not in ref]
    extra_grad = sorted(k[len("grad/"):] for k in ref if k.startswith("grad/")
                        and k[len("grad/"):] not in shapes)
    good &= check("gradient names", not no_grad and not extra_grad,
                  "one reference/grad/<name> per parameter"
                  + (f"; missing: {no_grad}" if no_grad else "")
                  + (f"; not in the model: {extra_grad}" if extra_grad else ""))
    bad = [f"grad/{n} {tuple(ref[f'grad/{n}'].shape)} (expected {s})" for n, s in shapes.items()
           if f"grad/{n}" in ref and tuple(ref[f"grad/{n}"].shape) != s]
    good &= check("gradient shapes", not bad, "as the parameters"
                  + (f"; differ: {bad}" if bad else ""))

    fields = ("tokens", "labels", "loss_mask")
    absent = [k for k in fields + ("loss",) if k not in ref]
    if absent:
        check("batch", False, f"missing reference/{absent}")
        return False
    want = (cfg.batch, cfg.seq)
    wrong = [f"{k} {tuple(ref[k].shape)}" for k in fields if tuple(ref[k].shape) != want]
    good &= check("batch shapes", not wrong and ref["loss"].numel() == 1,
                  f"(B, S) = {want}, loss shape {tuple(ref['loss'].shape)}"
                  + (f"; differ: {wrong}" if wrong else ""))
    if wrong:
        return False
    lm = ref["loss_mask"] != 0
    ids_ok = 0 <= int(ref["tokens"].min()) and int(ref["tokens"].max()) < cfg.vocab
    labels_ok = bool(((ref["labels"] >= 0) & (ref["labels"] < cfg.vocab))[lm].all())
    good &= check("token ids", ids_ok and labels_ok and bool(lm.any()),
                  f"tokens and loss-masked labels in [0, {cfg.vocab}); "
                  f"{int(lm.sum())} of {lm.numel()} positions in the loss")
    return good


def run(W0, ref, cfg, dtype):
    """Loss and every gradient of this model in dtype (returned as float64)."""
    W = {k: v.to(dtype).requires_grad_(True) for k, v in W0.items()}
    logits = forward(W, ref["tokens"].long(), cfg)
    loss = masked_loss(logits, ref["labels"], ref["loss_mask"].to(dtype))
    loss.backward()
    return loss.item(), {n: (W[n].grad if W[n].grad is not None else torch.zeros_like(W[n]))
                         .double() for n in W}


def main(dump_file, variant):
    cfg = Config(variant)
    with h5py.File(dump_file, "r") as f:
        if "model" not in f or "reference" not in f:
            check("dump layout", False, f"{dump_file} has no model/ or reference/ group")
            return 1
        W0 = load_tensors(f, "model")
        ref = load_tensors(f, "reference")
    if not check_inputs(W0, ref, cfg):
        print(f"mamba_reference: variant {variant}: the dump does not match the model; "
              "not compared")
        return 1

    good = True
    torch_loss, grads = run(W0, ref, cfg, torch.float64)
    ours = ref["loss"].double().reshape(-1)[0].item()
    rel = abs(torch_loss - ours) / abs(torch_loss)
    good &= check("loss", rel <= LOSS_RTOL,
                  f"torch {torch_loss:.8f} ours {ours:.8f} rel {rel:.2e} (tolerance {LOSS_RTOL})")
    bad = []
    for name in expected_shapes(cfg):
        mine, theirs = grads[name], ref[f"grad/{name}"].double()
        scale = mine.abs().max().item() or 1.0
        err = (mine - theirs).abs().max().item()
        tol = GRAD_RTOL * scale
        ok = err <= tol   # NaN counts as a mismatch
        if not ok:
            bad.append(name)
        good &= check(f"grad {name}", ok,
                      f"max|diff| {err:.3e}, tolerance {tol:.3e} ({GRAD_RTOL} x max|grad| "
                      f"{scale:.3e})")
    if bad:
        # To tell a real difference from float32 round-off: this model's own fp32 gradients
        # against its fp64 ones, on the same scale.
        _, g32 = run(W0, ref, cfg, torch.float32)
        print(f"     {len(bad)} mismatching gradient(s); first: {bad[0]}. This model's own "
              "fp32-vs-fp64 difference, for scale:")
        for n in bad:
            scale = grads[n].abs().max().item() or 1.0
            print(f"       {n}: {(g32[n] - grads[n]).abs().max().item() / scale:.2e} "
                  "of max|grad|")
    kind = "pure Mamba" if variant == "a" else "hybrid"
    print(f"mamba_reference: variant {variant} ({kind}, pattern {cfg.pattern}): "
          + ("everything matches" if good else "MISMATCH"))
    return 0 if good else 1


# ---------------------------------------------------------------------------------------------

def random_weights(cfg, gen, dtype=torch.float64):
    """Random weights of the model's shapes, scaled so activations stay O(1) and the SSM decays
    span slow to fast (A in [1, 16], softplus(dt_bias) in [1e-3, 0.1] as Megatron initialises,
    plus the projected dt)."""
    W = {}
    for name, shape in expected_shapes(cfg).items():
        t = torch.randn(shape, generator=gen, dtype=dtype)
        if name.endswith("norm_weight") or name.endswith("norm.weight"):
            t = 1.0 + 0.1 * t
        elif name.endswith("A_log"):
            t = torch.log(1 + 15 * torch.rand(shape, generator=gen, dtype=dtype))
        elif name.endswith("dt_bias"):
            dt = torch.exp(torch.rand(shape, generator=gen, dtype=dtype)
                           * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            t = dt + torch.log(-torch.expm1(-dt))          # inverse softplus
        elif name.endswith(".D"):
            t = 1.0 + 0.1 * t
        elif name.endswith("conv1d.bias"):
            t = 0.1 * t
        elif len(shape) >= 2:
            t = t / math.sqrt(math.prod(shape[1:]))   # fan-in scaling
        W[name] = t
    return W


def self_test():
    good = True
    gen = torch.Generator().manual_seed(1234)
    cfg = Config("a")
    # 1. The scan alone, on the mixer's own inputs: values and gradients (a random functional of
    #    y) of the recurrence against the chunked SSD, for chunks that do not divide S (16), that
    #    do (8) and one chunk longer than S (64).
    b, s = cfg.batch, cfg.seq
    x = torch.randn(b, s, cfg.nheads, cfg.headdim, generator=gen, dtype=torch.float64)
    # decays exp(dt A) from ~0.3 to ~0.999 so that states carry across chunk boundaries
    dt = F.softplus(torch.randn(b, s, cfg.nheads, generator=gen, dtype=torch.float64) - 2.0)
    A = -torch.exp(torch.linspace(math.log(0.02), math.log(4.0), cfg.nheads, dtype=torch.float64))
    B = torch.randn(b, s, cfg.ngroups, cfg.d_state, generator=gen, dtype=torch.float64)
    C = torch.randn(b, s, cfg.ngroups, cfg.d_state, generator=gen, dtype=torch.float64)
    D = torch.randn(cfg.nheads, generator=gen, dtype=torch.float64)
    w = torch.randn(b, s, cfg.nheads, cfg.headdim, generator=gen, dtype=torch.float64)
    inputs = (x, dt, A, B, C, D)

    def value_and_grads(fn):
        leaves = [t.clone().requires_grad_(True) for t in inputs]
        y = fn(*leaves)
        (y * w).sum().backward()
        return y.detach(), [t.grad for t in leaves]

    y_rec, g_rec = value_and_grads(ssm_recurrence)
    decay = torch.exp(dt * A)
    # The test must exercise the state passing: restarting the recurrence at every chunk
    # boundary has to change y far beyond the tolerance.
    restarted = torch.cat([ssm_recurrence(x[:, i:i + 16], dt[:, i:i + 16], A, B[:, i:i + 16],
                                          C[:, i:i + 16], D) for i in range(0, s, 16)], dim=1)
    carried = (y_rec - restarted).abs().max().item()
    good &= check("state carried across chunk boundaries", carried > 1e-2,
                  f"restarting the state every 16 steps changes y by up to {carried:.2e}")
    for chunk in (16, 8, 64):
        y_chk, g_chk = value_and_grads(lambda *a: ssd_chunked(*a, chunk))
        scale = max(1.0, y_rec.abs().max().item())
        err = (y_rec - y_chk).abs().max().item()
        gerr = max(((a - c).abs().max() / max(1.0, a.abs().max().item())).item()
                   for a, c in zip(g_rec, g_chk))
        good &= check(f"recurrence vs chunked SSD, S {s}, chunk {chunk}",
                      err <= SELF_TEST_ATOL * scale and gerr <= SELF_TEST_ATOL,
                      f"max|diff| y {err:.2e} (max|y| {y_rec.abs().max().item():.2f}), "
                      f"gradients of x, dt, A, B, C, D: max relative {gerr:.2e} "
                      f"(tolerance {SELF_TEST_ATOL}); per-step decay in "
                      f"[{decay.min().item():.3f}, {decay.max().item():.3f}]")

    # 2. The whole mixer with random weights of the dump's shapes, both scans.
    W = random_weights(cfg, gen)
    h_in = torch.randn(b, s, cfg.h, generator=gen, dtype=torch.float64)
    p = "decoder.layers.0.mixer."
    out_rec = mamba_mixer(h_in, W, p, cfg)
    out_chk = mamba_mixer(h_in, W, p, cfg, scan=lambda *a: ssd_chunked(*a, 16))
    err = (out_rec - out_chk).abs().max().item()
    scale = max(1.0, out_rec.abs().max().item())
    good &= check("MambaMixer with random weights, recurrence vs chunked SSD (chunk 16)",
                  err <= SELF_TEST_ATOL * scale,
                  f"max|diff| {err:.2e} (max|out| {out_rec.abs().max().item():.2f})")

    # 3. Causality of the whole model and a finite loss/gradients for both variants.
    for variant in ("a", "b"):
        cfg = Config(variant)
        W0 = random_weights(cfg, gen)
        tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
        labels = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
        mask = (torch.rand(cfg.batch, cfg.seq, generator=gen) < 0.8).double()
        ref = {"tokens": tokens, "labels": labels, "loss_mask": mask}
        loss, grads = run(W0, ref, cfg, torch.float64)
        finite = all(torch.isfinite(g).all() for g in grads.values())
        nonzero = all(g.abs().max() > 0 for g in grads.values())
        t2 = tokens.clone()
        t2[:, 30:] = (t2[:, 30:] + 1) % cfg.vocab
        with torch.no_grad():
            l1 = forward(W0, tokens, cfg)
            l2 = forward(W0, t2, cfg)
        causal = (l1[:, :30] - l2[:, :30]).abs().max().item() == 0.0
        changed = (l1[:, 30:] - l2[:, 30:]).abs().max().item() > 0.0
        good &= check(f"variant {variant} ({cfg.pattern}) on random weights",
                      math.isfinite(loss) and finite and nonzero and causal and changed,
                      f"loss {loss:.4f} (ln V = {math.log(cfg.vocab):.4f}), "
                      f"{len(grads)} gradients finite and non-zero: {finite and nonzero}, "
                      f"causal (logits before position 30 unchanged by later tokens): {causal}")
    print("mamba_reference: self-test " + ("passed" if good else "FAILED"))
    return 0 if good else 1


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    sys.exit(main(*sys.argv[1:]))
