#!/usr/bin/env python3
"""Peers of tests/bench/train_step.cpp: one full training step (forward + mean softmax
cross-entropy + backward + AdamW update) in PyTorch eager, torch.compile and JAX (jax.jit of the
whole step with a hand-written AdamW), on the CPU, batch 128, float32 (on cuda with --device
cuda; mixed precision with --amp bf16|fp16).

Models (the same functions as sinter's, with sinter's layouts: Linear weights are [in, out] and
y = x @ W + b):
  mlp  (x - 0.2860) / 0.3530, flatten, 784-512-256-10 with ReLU (recipes/mlp.cpp)
  vit  sinter::ViT, ViTConfig{image 28, patch 7, dim 64, depth 4, heads 4, classes 10}:
       7x7 patches [B, 16, 49] -> Linear(49, 64) + positions [16, 64] -> 4 pre-norm blocks
       (LayerNorm -> attention: qkv Linear(64, 192) reshaped [B, T, 3, H, Dh] and permuted to
       [3, B, H, T, Dh], softmax(Q K^T / 4) V, heads merged, Linear(64, 64) -> residual;
       LayerNorm -> Linear(64, 256) -> GELU (tanh) -> Linear(256, 64) -> residual)
       -> LayerNorm -> mean over tokens -> Linear(64, 10)
  distill  the distill recipe's pair (tests/bench/train_step.cpp --model distill): the vit above
       as a frozen teacher (its parameters follow the student's in the pattern phases, 1001 + k)
       and a student ViT 28/7, dim 32, depth 2, 2 heads; loss 0.5·T²·KL(softmax(t/T) ‖
       softmax(s/T)) (batchmean) + 0.5·CE(s), T = 2; the teacher's forward under no_grad and the
       optimizer over the student only (PyTorch peers only)
  distill-vit-b-s  the same with ViT-B/16 (224x224x3, width 768, 12 blocks, 12 heads, 1000
       classes) as the teacher and ViT-S/16 (width 384, 12 blocks, 6 heads) as the student,
       images [B, 3, 224, 224], batch 256 (--batch N overrides it); sinter's ViTs (no class
       token, mean over tokens; patches flattened channel-major like a Conv2d's weight)
  gpt, gpt2-small  sinter::GPT in the configurations of GPT below: token embedding + positions
       -> pre-norm blocks as the ViT's with causal attention -> LayerNorm -> Linear(width, vocab),
       cross-entropy over the next token of each of the [B, T] ids; --batch N overrides B
       (as train_step --batch N)
  gpt2-small-tied  gpt2-small as GPT-2 was released: the head is the token embedding
       (logits = states @ tokens.weight.T, no head bias), 124M parameters
AdamW: lr 1e-3, betas (0.9, 0.999), eps 1e-8, decoupled weight decay 1e-4 on every parameter.
Images, labels and parameters are the deterministic patterns of train_step.cpp, so every peer
prints the same initial loss (`loss`) and about the same `final_loss` after the same steps
(under --amp only about the same initial loss: each library rounds at other places).

What one step is:
  torch-eager    opt.zero_grad(); loss = f(params); loss.backward(); opt.step()
                 (torch.optim.AdamW(fused=True), the fastest CPU AdamW; ViT attention through
                 F.scaled_dot_product_attention unless --torch-attention math)
  torch-compile  the same with f under torch.compile and opt.step under torch.compile
                 (PyTorch's "compiled optimizer" recipe; the optimizer then is the default one)
  jax-jit        jax.jit of value_and_grad + the AdamW update, parameters and state donated
                 (float32 only: it refuses --amp bf16|fp16)

Mixed precision (--amp bf16|fp16, PyTorch peers; sinter's `train_step --amp`): the parameters
stay float32 (master weights) and the step is
  opt.zero_grad(set_to_none=True)
  with torch.autocast(device_type, dtype=torch.bfloat16 | torch.float16):
      loss = f(params)                  # GPT attention: F.scaled_dot_product_attention(causal),
                                        # or with --torch-attention math the decomposed one
                                        # (scores, mask, softmax, weighted sum) under autocast
  loss.backward(); opt.step()           # fp16: scaler.scale(loss).backward(); scaler.step(opt);
                                        #       scaler.update()  (torch.amp.GradScaler defaults:
                                        #       scale 2^16, growth 2 every 2000, backoff 0.5)
with torch.optim.AdamW(fused=True) for both peers (torch-compile compiles f only, the optimizer
is the fused one). --amp off (the default) is the float32 step above, unchanged.

Each peer runs in its own child process with the thread count fixed before torch / jax is
imported, and prints one machine-readable line:
  peer=<name> model=<m> compile_s=<first call, s | na> median_step_s=<s> threads=<n> iters=<n>
  loss=<first step> final_loss=<last step> maxrss_mb=<ru_maxrss> base_rss_mb=<after imports>
  device=<d> amp=<off|bf16|fp16> batch=<n> [peak_mem_mb=<MB>]
peak_mem_mb (--device cuda only) is torch.cuda.max_memory_allocated() / 2^20 over the steps after
the first call (the peak statistics are reset once the first call, and with it any compilation,
has finished): parameters, gradients, optimizer state and activations of a training step.

`--peer P --serve` runs peer P in this process as a contender of tests/bench/train_rounds.py:
after the first call and --warmup steps it prints `ready peer=P model=<m> compile_s=<s | na>
loss=<first step> device=<d>`, answers `run K [W]` on stdin (W untimed steps, then K timed
ones) with `times=<s>,...` until `quit`, then prints the line above over every timed step
(peers.serve).
"""
import argparse
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import (limit_threads, pattern, protocol_stream, run_each_in_child, serve,  # noqa: E402
                   timed)  # (shared with peers.py)

PEERS = ("torch-eager", "torch-compile", "jax-jit")
MODELS = ("mlp", "vit", "distill", "distill-vit-b-s", "gpt", "gpt2-small", "gpt2-small-tied")
# GPT configurations of train_step.cpp: vocabulary, context, width, layers, heads, batch.
GPT = {"gpt": dict(vocab=256, context=64, dim=128, depth=4, heads=4, batch=32),
       "gpt2-small": dict(vocab=50304, context=1024, dim=768, depth=12, heads=12, batch=8)}
GPT["gpt2-small-tied"] = dict(GPT["gpt2-small"], tied=True)
BATCH, SIDE, CLASSES = 128, 28, 10
LR, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 1e-4
# ViT
PATCH, DIM, DEPTH, HEADS = 7, 64, 4, 4
TOKENS = (SIDE // PATCH) ** 2
DH = DIM // HEADS
# The ViTs by model name: image side, patch, channels, width, depth, heads, classes, batch.
# "distill" and "distill-vit-b-s" are students; TEACHER names each one's teacher.
VIT = {name: dict(zip(("image", "patch", "channels", "dim", "depth", "heads", "classes",
                       "batch"), c)) for name, c in {
    "vit": (28, 7, 1, 64, 4, 4, 10, 128),
    "teacher": (28, 7, 1, 64, 4, 4, 10, 128),
    "distill": (28, 7, 1, 32, 2, 2, 10, 128),
    "vit-b": (224, 16, 3, 768, 12, 12, 1000, 256),
    "distill-vit-b-s": (224, 16, 3, 384, 12, 6, 1000, 256)}.items()}
TEACHER = {"distill": "teacher", "distill-vit-b-s": "vit-b"}
KD_T, KD_ALPHA = 2.0, 0.5
TEACHER_PHASE = 1001.0


def param_spec(model):
    """[(name, shape)] in sinter's for_each_parameter order (train_step.cpp --print-params)."""
    if model == "mlp":
        widths = [784, 512, 256, 10]
        spec = []
        for i in range(3):
            spec += [("mlp.layers.%d.weight" % i, (widths[i], widths[i + 1])),
                     ("mlp.layers.%d.bias" % i, (widths[i + 1],))]
        return spec
    if model in GPT:
        c = GPT[model]
        d, out = c["dim"], c["vocab"]
        spec = [("tokens.weight", (c["vocab"], d)), ("position", (c["context"], d))]
        depth = c["depth"]
    else:
        c = VIT[model]
        d, depth, out, p = c["dim"], c["depth"], c["classes"], c["patch"]
        spec = [("embed.proj.weight", (c["channels"] * p * p, d)), ("embed.proj.bias", (d,)),
                ("position", ((c["image"] // p) ** 2, d))]
    for i in range(depth):
        p = "blocks.%d." % i
        spec += [(p + "ln1.gamma", (d,)), (p + "ln1.beta", (d,)),
                 (p + "attn.qkv.weight", (d, 3 * d)), (p + "attn.qkv.bias", (3 * d,)),
                 (p + "attn.proj.weight", (d, d)), (p + "attn.proj.bias", (d,)),
                 (p + "ln2.gamma", (d,)), (p + "ln2.beta", (d,)),
                 (p + "mlp.layers.0.weight", (d, 4 * d)), (p + "mlp.layers.0.bias", (4 * d,)),
                 (p + "mlp.layers.1.weight", (4 * d, d)), (p + "mlp.layers.1.bias", (d,))]
    spec += [("norm.gamma", (d,)), ("norm.beta", (d,))]
    if not (model in GPT and GPT[model].get("tied")):
        spec += [("head.weight", (d, out)), ("head.bias", (out,))]
    return spec


def batch_of(model, batch=None):
    """The batch a step of `model` takes: `batch` (--batch, GPT models only) or the model's."""
    if model in GPT:
        return batch or GPT[model]["batch"]
    if model in VIT:
        return batch or VIT[model]["batch"]
    return BATCH


def make_inputs(np, model, batch=None):
    """images [B, 28, 28] and labels [B] (int64) — for GPTs token ids [B, T] and next tokens
    [B, T], B = `batch` or the model's — and {name: parameter} (ordered), as numpy arrays
    (train_step.cpp's patterns)."""
    if model in GPT:
        c = GPT[model]
        b = batch_of(model, batch)
        flat = np.arange(b * c["context"], dtype=np.int64).reshape(b, c["context"])
        images = (flat * 7 + 3) % c["vocab"]
        labels = (flat * 7 + 10) % c["vocab"]
    elif model in VIT and VIT[model]["channels"] > 1:
        c, b = VIT[model], batch_of(model, batch)
        images = pattern(np, (b, c["channels"], c["image"], c["image"]), 0.5, 0.0, 0.5)
        labels = (np.arange(b, dtype=np.int64) * 7) % c["classes"]
    else:
        images = pattern(np, (BATCH, SIDE, SIDE), 0.5, 0.0, 0.5)
        labels = (np.arange(BATCH, dtype=np.int64) * 7) % CLASSES
    return images, labels, init_params(np, model)


def init_params(np, model, first_phase=1.0):
    """{name: parameter} (ordered) of `model`: parameter k gets phase first_phase + k."""
    params = {}
    for k, (name, shape) in enumerate(param_spec(model)):
        phase = first_phase + k
        if name.endswith("weight"):
            params[name] = pattern(np, shape, 1.0 / math.sqrt(shape[0]), phase)
        elif name.endswith("gamma"):
            params[name] = pattern(np, shape, 0.1, phase, 1.0)
        else:
            params[name] = pattern(np, shape, 0.1, phase)
    return params


def maxrss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # kilobytes on Linux


# ---------------------------------------------------------------------------------------------
# PyTorch

def torch_forward(torch, F, model, P, images, attention):
    b = images.shape[0]
    if model == "mlp":
        h = ((images - 0.2860) * (1.0 / 0.3530)).reshape(b, 784)
        for i in range(3):
            h = h @ P["mlp.layers.%d.weight" % i] + P["mlp.layers.%d.bias" % i]
            if i < 2:
                h = torch.relu(h)
        return h
    gpt = model in GPT
    if gpt:  # images are token ids [B, T]
        c = GPT[model]
        dim, heads, depth, tokens = c["dim"], c["heads"], c["depth"], images.shape[1]
        x = P["tokens.weight"][images] + P["position"][:tokens]
    else:
        c = VIT[model]
        dim, depth, heads, p, ch = c["dim"], c["depth"], c["heads"], c["patch"], c["channels"]
        g = c["image"] // p
        tokens = g * g
        patches = images.reshape(b, ch, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(
            b, tokens, ch * p * p)
        x = patches @ P["embed.proj.weight"] + P["embed.proj.bias"] + P["position"]
    dh = dim // heads
    causal = None
    if gpt and attention != "sdpa":  # sinter masks future positions with -1e9
        causal = torch.ones(tokens, tokens, dtype=torch.bool, device=x.device).tril()
    for i in range(depth):
        p = "blocks.%d." % i
        h = F.layer_norm(x, (dim,), P[p + "ln1.gamma"], P[p + "ln1.beta"], 1e-5)
        qkv = (h @ P[p + "attn.qkv.weight"] + P[p + "attn.qkv.bias"]).reshape(
            b, tokens, 3, heads, dh).permute(2, 0, 3, 1, 4)  # [3, B, H, T, Dh]
        q, k, v = qkv[0], qkv[1], qkv[2]
        if attention == "sdpa":
            att = F.scaled_dot_product_attention(q, k, v, is_causal=gpt)  # scale 1/sqrt(Dh)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))
            if causal is not None:
                scores = scores.masked_fill(~causal, -1e9)
            att = torch.softmax(scores, -1) @ v
        merged = att.permute(0, 2, 1, 3).reshape(b, tokens, dim)
        x = x + (merged @ P[p + "attn.proj.weight"] + P[p + "attn.proj.bias"])
        h = F.layer_norm(x, (dim,), P[p + "ln2.gamma"], P[p + "ln2.beta"], 1e-5)
        h = F.gelu(h @ P[p + "mlp.layers.0.weight"] + P[p + "mlp.layers.0.bias"],
                   approximate="tanh")
        x = x + (h @ P[p + "mlp.layers.1.weight"] + P[p + "mlp.layers.1.bias"])
    x = F.layer_norm(x, (dim,), P["norm.gamma"], P["norm.beta"], 1e-5)
    if gpt and c.get("tied"):
        return x @ P["tokens.weight"].t()  # [B, T, vocab]
    if gpt:
        return x @ P["head.weight"] + P["head.bias"]  # [B, T, vocab]
    return x.mean(1) @ P["head.weight"] + P["head.bias"]


def run_torch(args, compiled):
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32  # f32 GEMMs on TF32 tensor cores
    base = maxrss_mb()
    device = torch.device(args.device)
    images, labels, params = make_inputs(np, args.model, args.batch)
    images, labels = torch.from_numpy(images).to(device), torch.from_numpy(labels).to(device)
    P = {k: torch.from_numpy(v).to(device).requires_grad_() for k, v in params.items()}

    def loss_fn(images, labels):
        logits = torch_forward(torch, F, args.model, P, images, args.torch_attention)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    if args.model in TEACHER:  # a frozen teacher: no grad, no optimizer state
        teacher_model = TEACHER[args.model]
        T = {k: torch.from_numpy(v).to(device)
             for k, v in init_params(np, teacher_model, TEACHER_PHASE).items()}
        if args.amp != "off":  # stored in the autocast precision, as sinter stores it
            T = {k: v.to(torch.bfloat16 if args.amp == "bf16" else torch.float16)
                 for k, v in T.items()}

        def loss_fn(images, labels):  # noqa: F811 (the distillation loss replaces the one above)
            with torch.no_grad():
                teacher = torch_forward(torch, F, teacher_model, T, images, args.torch_attention)
            student = torch_forward(torch, F, args.model, P, images, args.torch_attention)
            kl = F.kl_div(F.log_softmax(student / KD_T, -1), F.log_softmax(teacher / KD_T, -1),
                          reduction="batchmean", log_target=True)
            return (KD_ALPHA * KD_T * KD_T * kl +
                    (1 - KD_ALPHA) * F.cross_entropy(student, labels))

    adamw = dict(lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WD)
    if compiled and args.amp == "off":
        opt = torch.optim.AdamW(list(P.values()), **adamw)
        fn = torch.compile(loss_fn)

        @torch.compile(fullgraph=False)
        def opt_step():
            opt.step()
    else:  # torch-eager; under --amp both peers (torch-compile compiles only the loss)
        opt = torch.optim.AdamW(list(P.values()), fused=True, **adamw)
        fn = torch.compile(loss_fn) if compiled else loss_fn
        opt_step = opt.step

    if args.amp == "off":
        def step():
            opt.zero_grad(set_to_none=True)
            loss = fn(images, labels)
            loss.backward()
            opt_step()
            return loss.detach()
    else:
        # Mixed precision: float32 master parameters, autocast around the loss; fp16 scales
        # the loss (GradScaler: the update is skipped when a gradient is inf / NaN).
        low = torch.bfloat16 if args.amp == "bf16" else torch.float16
        scaler = torch.amp.GradScaler(device.type) if args.amp == "fp16" else None

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=low):
                loss = fn(images, labels)
            if scaler is None:
                loss.backward()
                opt_step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            return loss.detach()

    if args.print_losses:  # every step's loss (a host sync each): where two curves part
        one_step, taken = step, [0]

        def step():
            out = one_step()
            taken[0] += 1
            print("step=%d loss=%.6f" % (taken[0], float(out)), flush=True)
            return out

    calls = [0]

    def sync(out):
        if device.type == "cuda":
            torch.cuda.synchronize()  # GPU work is asynchronous: time it to completion
            calls[0] += 1
            if calls[0] == 1:  # the first call (and any compiling) done: the steps' peak from here
                torch.cuda.reset_peak_memory_stats()
        return out

    (first, median, first_loss, loss), steps = measure(args, step, sync)
    if device.type == "cuda":
        args.peak_mem_mb = torch.cuda.max_memory_allocated() / 2 ** 20
    return first if compiled else None, median, float(first_loss), float(loss), base, steps


# ---------------------------------------------------------------------------------------------
# JAX

def jax_forward(jax, jnp, model, P, images):
    b = images.shape[0]
    if model == "mlp":
        h = ((images - 0.2860) * (1.0 / 0.3530)).reshape(b, 784)
        for i in range(3):
            h = h @ P["mlp.layers.%d.weight" % i] + P["mlp.layers.%d.bias" % i]
            if i < 2:
                h = jax.nn.relu(h)
        return h

    def layer_norm(x, gamma, beta):
        centered = x - jnp.mean(x, -1, keepdims=True)
        var = jnp.mean(centered * centered, -1, keepdims=True)
        return centered * jax.lax.rsqrt(var + 1e-5) * gamma + beta

    g = SIDE // PATCH
    patches = images.reshape(b, g, PATCH, g, PATCH).transpose(0, 1, 3, 2, 4).reshape(
        b, TOKENS, PATCH * PATCH)
    x = patches @ P["embed.proj.weight"] + P["embed.proj.bias"] + P["position"]
    for i in range(DEPTH):
        p = "blocks.%d." % i
        h = layer_norm(x, P[p + "ln1.gamma"], P[p + "ln1.beta"])
        qkv = (h @ P[p + "attn.qkv.weight"] + P[p + "attn.qkv.bias"]).reshape(
            b, TOKENS, 3, HEADS, DH).transpose(2, 0, 3, 1, 4)  # [3, B, H, T, Dh]
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ jnp.swapaxes(k, -2, -1)) * (1.0 / math.sqrt(DH))
        att = jax.nn.softmax(scores, -1) @ v
        merged = att.transpose(0, 2, 1, 3).reshape(b, TOKENS, DIM)
        x = x + (merged @ P[p + "attn.proj.weight"] + P[p + "attn.proj.bias"])
        h = layer_norm(x, P[p + "ln2.gamma"], P[p + "ln2.beta"])
        h = jax.nn.gelu(h @ P[p + "mlp.layers.0.weight"] + P[p + "mlp.layers.0.bias"],
                        approximate=True)
        x = x + (h @ P[p + "mlp.layers.1.weight"] + P[p + "mlp.layers.1.bias"])
    x = layer_norm(x, P["norm.gamma"], P["norm.beta"])
    return jnp.mean(x, 1) @ P["head.weight"] + P["head.bias"]


def run_jax(args):
    import numpy as np
    import jax
    import jax.numpy as jnp

    base = maxrss_mb()
    images, labels, params = make_inputs(np, args.model, args.batch)
    images, labels = jnp.asarray(images), jnp.asarray(labels.astype(np.int32))
    P = {k: jnp.asarray(v) for k, v in params.items()}
    M = {k: jnp.zeros_like(v) for k, v in P.items()}
    V = {k: jnp.zeros_like(v) for k, v in P.items()}

    def loss_fn(P, images, labels):
        logp = jax.nn.log_softmax(jax_forward(jax, jnp, args.model, P, images))
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    def train_step(P, M, V, t, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(P, images, labels)
        t = t + 1
        bias1 = 1.0 - BETA1 ** t.astype(jnp.float32)
        bias2 = 1.0 - BETA2 ** t.astype(jnp.float32)
        newP, newM, newV = {}, {}, {}
        for k in P:
            g = grads[k]
            m = BETA1 * M[k] + (1.0 - BETA1) * g
            v = BETA2 * V[k] + (1.0 - BETA2) * g * g
            p = P[k] - LR * WD * P[k]
            newP[k] = p - LR * (m / bias1) / (jnp.sqrt(v / bias2) + EPS)
            newM[k], newV[k] = m, v
        return newP, newM, newV, t, loss

    fn = jax.jit(train_step, donate_argnums=(0, 1, 2))
    state = [P, M, V, jnp.zeros((), jnp.int32)]

    def step():
        state[0], state[1], state[2], state[3], loss = fn(*state, images, labels)
        return loss

    def sync(loss):
        jax.block_until_ready(state)
        return jax.block_until_ready(loss)

    (first, median, first_loss, loss), steps = measure(args, step, sync)
    return first, median, float(first_loss), float(loss), base, steps


# ---------------------------------------------------------------------------------------------

def measure(args, step, sync):
    """((first-call s, median step s, first result, last result), timed steps): --warmup and
    --iters steps, or rounds served on request under --serve."""
    if not args.serve:
        return timed(step, args.warmup, args.iters, sync), args.iters

    def ready(first, first_out):
        print("ready peer=%s model=%s compile_s=%s loss=%.6f device=%s" %
              (args.peer, args.model, "na" if args.peer == "torch-eager" else "%.4g" % first,
               float(first_out), args.device), file=args.proto, flush=True)
    return serve(step, args.warmup, sync, ready, args.proto)


def child(args):
    limit_threads(args.threads)
    args.proto = protocol_stream() if args.serve else sys.stdout
    args.peak_mem_mb = None  # set by run_torch on cuda
    if args.peer == "jax-jit":
        first, median, loss0, loss, base, steps = run_jax(args)
    else:
        # torch.compile writes its kernels to a cache; a fresh one makes compile_s a cold compile.
        with tempfile.TemporaryDirectory(prefix="sinter-bench-inductor-") as cache:
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache)
            first, median, loss0, loss, base, steps = run_torch(args, args.peer == "torch-compile")
    # New fields go at the end: train_rounds.py, report.py and gpu_table.py read key=value.
    print("peer=%s model=%s compile_s=%s median_step_s=%.6g threads=%d iters=%d loss=%.6f "
          "final_loss=%.6f maxrss_mb=%.1f base_rss_mb=%.1f device=%s amp=%s batch=%d%s" %
          (args.peer, args.model, "na" if first is None else "%.4g" % first, median,
           args.threads, steps, loss0, loss, maxrss_mb(), base, args.device, args.amp,
           batch_of(args.model, args.batch),
           "" if args.peak_mem_mb is None else " peak_mem_mb=%.1f" % args.peak_mem_mb),
          file=args.proto, flush=True)


def measure_peak():
    """The device's measured bf16 tensor-core throughput: the denominator of model FLOP
    utilisation. Prints peer=peak model=bf16-gemm tflops=<best of 20>."""
    import torch
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(20):
        t0 = time.perf_counter()
        a @ b
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    print("peer=peak model=bf16-gemm tflops=%.1f device=%s" %
          (2 * n ** 3 / best / 1e12, torch.cuda.get_device_name()), flush=True)
    return 0


def search_max_batch(args, peer):
    """The largest batch one training step of `peer` runs at without running out of memory, by
    trial: each batch in a process of its own (an out-of-memory error leaves the allocator's
    cache behind), doubling from --batch (default the model's) until a step fails, then
    bisecting to a multiple of --max-batch-step. Prints peer=<p> model=<m> max_batch=<N>
    oom_batch=<M> step=<s> trials=<t> device=<d> amp=<a>; M is the smallest batch seen to run
    out of memory. Other failures stop the search with the child's error."""
    trials = []

    def fits(batch):
        cmd = [sys.executable, os.path.abspath(__file__), "--peer", peer, "--model", args.model,
               "--device", args.device, "--amp", args.amp, "--threads", str(args.threads),
               "--batch", str(batch), "--warmup", "1", "--iters", "1"]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out = proc.stdout + proc.stderr
        trials.append(batch)
        if proc.returncode == 0 and "peer=" in proc.stdout:
            print("train_peers: %s batch %d runs" % (peer, batch), file=sys.stderr, flush=True)
            return True
        if any(m in out for m in ("out of memory", "OutOfMemoryError", "can't allocate memory")):
            print("train_peers: %s batch %d runs out of memory" % (peer, batch), file=sys.stderr,
                  flush=True)
            return False
        sys.stderr.write(out[-4000:])
        raise SystemExit("train_peers: %s failed at batch %d for another reason than memory "
                         "(exit %d); command: %s" % (peer, batch, proc.returncode, " ".join(cmd)))

    step = args.max_batch_step
    good, bad = 0, None
    batch = batch_of(args.model, args.batch)
    while bad is None:
        if fits(batch):
            good = batch
            batch *= 2
            if batch > 1 << 24:
                raise SystemExit("train_peers: %s still fits at batch %d; no memory limit found"
                                 % (peer, good))
        else:
            bad = batch
    while bad - good > step:
        middle = max(step, (good + bad) // 2 // step * step)
        if middle <= good or middle >= bad:
            break
        if fits(middle):
            good = middle
        else:
            bad = middle
    print("peer=%s model=%s max_batch=%d oom_batch=%d step=%d trials=%d device=%s amp=%s" %
          (peer, args.model, good, bad, step, len(trials), args.device, args.amp), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n")[-1])
    ap.add_argument("--model", choices=MODELS, default="mlp")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the PyTorch peers run (JAX peers run on the CPU only)")
    ap.add_argument("--tf32", action="store_true",
                    help="let f32 GEMMs use TF32 tensor cores (as SINTER_TF32=1)")
    ap.add_argument("--amp", choices=("off", "bf16", "fp16"), default="off",
                    help="mixed precision of the PyTorch peers: torch.autocast to bf16 / fp16 "
                    "(fp16 with torch.amp.GradScaler), float32 master parameters, fused AdamW "
                    "(as train_step --amp); default off: float32")
    ap.add_argument("--batch", type=int,
                    help="sequences per step of the gpt models (default: the model's, gpt 32, "
                    "gpt2-small 8; as train_step --batch)")
    ap.add_argument("--peak", action="store_true",
                    help="only measure the GPU's bf16 GEMM peak (8192^3, torch.matmul)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps after the first call")
    ap.add_argument("--iters", type=int, default=30, help="timed steps (median reported)")
    ap.add_argument("--torch-attention", choices=("sdpa", "math"), default="sdpa",
                    help="ViT attention in torch: F.scaled_dot_product_attention or the formula")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of " +
                    ",".join(PEERS))
    ap.add_argument("--peer", choices=PEERS,
                    help="run this one peer in this process (no child; with --serve)")
    ap.add_argument("--max-batch", action="store_true",
                    help="find the largest batch each of --peers trains at without running out "
                    "of memory (gpt and distill-vit-b-s models; each trial in a process of its "
                    "own; see search_max_batch)")
    ap.add_argument("--max-batch-step", type=int, default=64,
                    help="--max-batch: the granularity of the search (default 64)")
    ap.add_argument("--print-losses", action="store_true",
                    help="print step=N loss=L after every step (train_step --print-losses too)")
    ap.add_argument("--serve", action="store_true",
                    help="with --peer: serve rounds on stdin for train_rounds.py (see above)")
    args = ap.parse_args()
    if args.threads < 1 or args.iters < 1 or args.warmup < 0:
        ap.error("--threads and --iters must be at least 1, --warmup at least 0")
    if args.batch is not None and (args.batch < 1 or
                                   not (args.model in GPT or args.model == "distill-vit-b-s")):
        ap.error("--batch takes a positive count, for the gpt and distill-vit-b-s models only "
                 "(the others: %d)" % BATCH)
    if args.serve and not args.peer:
        ap.error("--serve needs --peer P")
    if args.peak:
        return measure_peak()
    for peer in [args.peer] if args.peer else args.peers.split(","):
        if peer not in PEERS:
            ap.error("unknown peer %r (known: %s)" % (peer, ", ".join(PEERS)))
        if args.device == "cuda" and peer == "jax-jit":
            ap.error("jax-jit runs on the CPU only; pick --peers torch-eager,torch-compile")
        if (args.model in GPT or args.model in TEACHER) and peer == "jax-jit":
            ap.error("the jax-jit peer has no %s model; pick --peers torch-eager,torch-compile"
                     % args.model)
        if args.amp != "off" and peer == "jax-jit":
            ap.error("the jax-jit peer runs float32 only (no --amp %s); pick --peers "
                     "torch-eager,torch-compile" % args.amp)
    if args.max_batch:
        if args.peer or args.serve:
            ap.error("--max-batch runs its own trials; leave out --peer and --serve")
        if not (args.model in GPT or args.model == "distill-vit-b-s"):
            ap.error("--max-batch needs a model whose batch --batch sets (gpt, gpt2-small, "
                     "distill-vit-b-s)")
        if args.max_batch_step < 1:
            ap.error("--max-batch-step must be at least 1")
        return max(search_max_batch(args, peer) for peer in args.peers.split(","))
    if args.peer:
        return child(args)
    return run_each_in_child(
        __file__, args.peers.split(","),
        ["--model", args.model, "--device", args.device] + (["--tf32"] if args.tf32 else []) +
        ["--threads", str(args.threads), "--warmup", str(args.warmup), "--iters", str(args.iters),
         "--torch-attention", args.torch_attention, "--amp", args.amp] +
        (["--batch", str(args.batch)] if args.batch is not None else []) +
        (["--print-losses"] if args.print_losses else []))

if __name__ == "__main__":
    sys.exit(main())
