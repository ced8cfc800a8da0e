#!/usr/bin/env python3
# tests/bench/amp_parity.py — mixed-precision parity: sinter beside PyTorch (docs/amp.md)
"""Mixed-precision parity study: does sinter's bf16 / fp16 training follow its f32 training as
closely as PyTorch's autocast follows PyTorch's f32?

One GPT (vocabulary 256 (bytes), --context 256, --dim 256, --depth 4, --heads 4; pre-norm blocks,
tanh GELU, a separate head with bias) trains on the gpt recipe's text (Debian's fortunes, or
--text FILE) from the same initial weights (written by sinter, tests/bench/amp_parity.cpp
--write-init, read here), on the same batches in the same order (--batch rows of --context + 1
bytes at seeded random offsets in the first 95% of the text), for --steps AdamW updates (lr 1e-3,
betas 0.9/0.999, eps 1e-8, weight decay 1e-4; float32 master weights). The last 5% of the text
gives the holdout batches (--holdout-batches of them, evenly spaced), evaluated in f32 at the end.

Runs (each sinter run is a process of amp_parity.cpp; the PyTorch runs happen in this process):
  sinter  f32, bf16, fp16 (dynamic loss scaling)  × SINTER_ATTENTION=fused and decomposed
  torch   eager f32, bf16, fp16 (GradScaler)      F.scaled_dot_product_attention(is_causal)
  torch   compile f32, bf16 (and fp16 on cuda)    torch.compile of the loss
  torch   eager-math f32, bf16 (and fp16 on cuda) attention decomposed: scores, masked_fill,
                                                  softmax, weighted sum (train_peers.py's)
(--device cpu runs fp16 only where the torch build's CPU autocast and GradScaler take it; a
torch without torch.compile (Debian's 1.13) skips the compiled runs.)

Per run it reports the loss curve (--out DIR/curves.tsv), the final loss (the mean training loss
over the last 10 steps), max |Δloss| against the same library's f32 run with the same attention
path (max_dloss: of the curves smoothed over 10 steps, each point the mean of the last 10
losses; raw_max: of the per-batch losses; mean_dloss: the mean per-batch |Δloss|), the holdout
loss, and, for the mixed-precision runs, the relative difference
||g - g_f32|| / ||g_f32|| of each parameter's gradient at the initial weights on batch 1
(--out DIR/grads.tsv; the largest is in the table; fp16's with its initial loss scale, 2^16,
divided out again), and the signed part of that difference along the f32 gradient,
<g - g_f32, g_f32> / ||g_f32||^2 (grads.tsv's along_f32; the table has its mean over the
parameters: the systematic part of the rounding, where the relative difference is mostly
noise). It ends with
  parity: sinter_bf16_max_dloss=<a> torch_bf16_max_dloss=<b> fused_vs_decomposed=<c> \
torch_eager_vs_compile=<d>
a: the larger max_dloss of sinter's two bf16 runs; b: the larger of PyTorch's bf16 runs;
c: the largest relative difference of the final losses of sinter's fused and decomposed runs
over f32, bf16 and fp16; d: the same between PyTorch's eager and compiled runs (`na` without
torch.compile). The line before it, `parity-more: ...`, has the fp16 figures and the largest
holdout distance of a mixed-precision run from its f32 run.

--check (CI's short version) exits 1 unless every loss is finite; a <= b + --check-slack;
sinter's fp16 max_dloss <= PyTorch's fp16 one (its bf16 one where the torch build has no fp16
autocast) + --check-slack; c <= max(d, 0.01) (0.01 when d is na); every mixed-precision holdout
loss is within 0.02 of its f32 run's; and in each mixed precision PyTorch ran, sinter's largest
relative gradient difference at the start is at most 1.25 times PyTorch's largest.

--seeds 0,1,2 runs the whole study once per seed (batch order and initial weights; each in
--out DIR/seed-<s>) and ends with a row per seed and the two lines over the seeds: max_dloss
figures averaged, the others their largest, and `sinter_bf16_closer=k/n` in parity-more (in k
of the n seeds sinter's bf16 max_dloss was at most PyTorch's). --init FILE starts both
libraries from FILE's weights (amp_parity --save writes a run's trained weights): the
gradient table then compares the libraries later in training.

Usage: amp_parity.py --sinter build/tests/bench/amp_parity [--device cpu|cuda] [--steps 300]
           [--batch 8] [--context 256] [--dim 256] [--depth 4] [--heads 4] [--text FILE]
           [--seed 0 | --seeds 0,1,2] [--init FILE] [--threads N] [--holdout-batches 8]
           [--out DIR] [--no-torch-eager] [--no-torch-compile] [--no-torch-math]
           [--only sinter|torch] [--modes off,bf16,fp16] [--check] [--check-slack 0.0]
Run it with a python that has torch: tests/bench/setup.sh's venv (build-bench/venv; torch with
torch.compile) or CI's build-ci/hf-venv (Debian's torch 1.13). With SINTER_HF_PYTHON set (CI
sets it) the script runs under that interpreter. Without torch it exits 77 (meson's SKIP),
except under SINTER_HF_PYTHON, where a missing torch fails.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_peers  # noqa: E402  (the PyTorch GPT that mirrors sinter::GPT, and its AdamW)

SKIP = 77
MODES = ("off", "bf16", "fp16")
LAST = 10  # the final loss: the mean over the last LAST steps
# The gradients at the start are taken with fp16's initial loss scale (sinter's LossScaling and
# torch.amp.GradScaler both start at 2^16), then divided by it: what the first update applies.
GRAD_SCALE = {"off": 1.0, "bf16": 1.0, "fp16": 65536.0}


def fortune_text():
    folder = os.environ.get("SINTER_FORTUNES_DIR", "/usr/share/games/fortunes")
    if not os.path.isdir(folder):
        sys.exit("amp_parity.py: no %s: apt-get install fortunes, or pass --text FILE" % folder)
    names = sorted(n for n in os.listdir(folder)
                   if "." not in n and os.path.isfile(os.path.join(folder, n)))
    return b"".join(open(os.path.join(folder, n), "rb").read() for n in names)


def make_batches(np, text, args):
    """(train rows [steps * batch, T + 1], holdout rows [holdout_batches * batch, T + 1])."""
    data = np.frombuffer(text, dtype=np.uint8)
    row = args.context + 1
    split = int(len(data) * 0.95)
    train, holdout = data[:split], data[split:]
    need_holdout = args.holdout_batches * args.batch
    if len(train) < 2 * row or len(holdout) < row + need_holdout:
        sys.exit("amp_parity.py: the text (%d bytes) is too short for rows of %d bytes" %
                 (len(data), row))
    rng = np.random.default_rng(args.seed)
    starts = rng.integers(0, len(train) - row, size=args.steps * args.batch)
    train_rows = np.stack([train[s:s + row] for s in starts])
    held = np.linspace(0, len(holdout) - row, need_holdout).astype(np.int64)
    return train_rows, np.stack([holdout[s:s + row] for s in held])


def read_safetensors(np, path):
    """name → float32 array of a safetensors file (F32 / BF16 / F16 tensors)."""
    with open(path, "rb") as f:
        raw = f.read()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    base = 8 + size
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        chunk = raw[base + begin:base + end]
        if info["dtype"] == "F32":
            a = np.frombuffer(chunk, dtype=np.float32)
        elif info["dtype"] == "BF16":
            a = (np.frombuffer(chunk, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F16":
            a = np.frombuffer(chunk, dtype=np.float16).astype(np.float32)
        else:
            sys.exit("amp_parity.py: %s: tensor %s is %s" % (path, name, info["dtype"]))
        out[name] = a.reshape(info["shape"]).copy()
    return out


def model_args(args):
    return ["--context", str(args.context), "--dim", str(args.dim), "--depth", str(args.depth),
            "--heads", str(args.heads)]


def sinter_run(args, work, mode, attention):
    """One sinter run: (losses, holdout loss, gradients at the start by parameter name)."""
    grads = os.path.join(work, "grads-sinter-%s-%s.safetensors" % (mode, attention))
    cmd = [args.sinter, "--init", os.path.join(work, "init.safetensors"),
           "--train", os.path.join(work, "train.bin"),
           "--holdout", os.path.join(work, "holdout.bin"), "--steps", str(args.steps),
           "--batch", str(args.batch), "--amp", mode, "--grads", grads,
           "--grad-scale", str(GRAD_SCALE[mode]),
           "--device", args.device] + model_args(args)
    env = dict(os.environ, SINTER_ATTENTION=attention, SINTER_NUM_THREADS=str(args.threads))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("amp_parity.py: %s failed (%d):\n%s" % (" ".join(cmd), done.returncode,
                                                          done.stderr[-3000:]))
    losses, holdout = [], None
    for line in done.stdout.splitlines():
        if line.startswith("loss step="):
            losses.append(float(line.split("value=")[1]))
        elif line.startswith("holdout loss="):
            holdout = float(line.split("=")[1])
    import numpy as np
    return losses, holdout, read_safetensors(np, grads)


def torch_runs(args, work, train_rows, holdout_rows):
    """The PyTorch runs: {(mode, path): (losses, holdout loss, first gradients)}."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    name = "parity"
    train_peers.GPT[name] = dict(vocab=256, context=args.context, dim=args.dim,
                                 depth=args.depth, heads=args.heads, batch=args.batch)
    init = {k[len("model."):]: v
            for k, v in read_safetensors(np, os.path.join(work, "init.safetensors")).items()}
    rows = torch.from_numpy(train_rows.astype(np.int64)).to(device)
    held = torch.from_numpy(holdout_rows.astype(np.int64)).to(device)

    # Debian's torch 1.13 has no F.scaled_dot_product_attention: its eager path is then the
    # decomposed one (scores, mask, softmax, weighted sum), as "eager-math" is elsewhere.
    sdpa = hasattr(F, "scaled_dot_product_attention")

    def loss_of(P, batch, attention="sdpa" if sdpa else "math"):
        logits = train_peers.torch_forward(torch, F, name, P, batch[:, :-1], attention)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                               batch[:, 1:].reshape(-1))

    paths = [] if args.no_torch_eager else ["eager"]
    if hasattr(torch, "compile") and not args.no_torch_compile:
        paths.append("compile")
    if sdpa and not args.no_torch_math:
        paths.append("eager-math")
    results = {}
    for path in paths:
        for mode in args.modes:
            low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)
            if mode == "fp16" and path != "eager" and device.type == "cpu":
                continue  # CPU fp16 is slow in inductor and in the math path, and rare
            # A copy each run: from_numpy shares the array, and AdamW updates in place.
            P = {k: torch.tensor(v, device=device, requires_grad=True) for k, v in init.items()}
            if path == "compile":
                fn = torch.compile(loss_of)
            elif path == "eager-math":
                fn = lambda P, batch: loss_of(P, batch, "math")  # noqa: E731
            else:
                fn = loss_of

            def forward(batch):
                if low is None:
                    return fn(P, batch)
                with torch.autocast(device.type, dtype=low):
                    return fn(P, batch)
            try:
                loss = forward(rows[:args.batch])  # the gradient at the start
                (loss * GRAD_SCALE[mode]).backward()
            except RuntimeError as e:  # e.g. a CPU autocast without float16
                print("torch %s %s: skipped (%s)" % (path, mode, str(e).splitlines()[0]))
                continue
            first = {k: (p.grad.detach().double() / GRAD_SCALE[mode]).float().cpu().numpy()
                     for k, p in P.items()}
            for p in P.values():
                p.grad = None
            opt = torch.optim.AdamW(list(P.values()), lr=train_peers.LR,
                                    betas=(train_peers.BETA1, train_peers.BETA2),
                                    eps=train_peers.EPS, weight_decay=train_peers.WD)
            scaler = None
            if mode == "fp16":
                try:
                    scaler = torch.amp.GradScaler(device.type)
                except (AttributeError, RuntimeError) as e:
                    print("torch %s fp16: skipped (no GradScaler: %s)" % (path, e))
                    continue
            losses = []
            started = time.time()
            for k in range(args.steps):
                opt.zero_grad(set_to_none=True)
                loss = forward(rows[k * args.batch:(k + 1) * args.batch])
                if scaler is None:
                    loss.backward()
                    opt.step()
                else:
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
                losses.append(float(loss.detach()))
            with torch.no_grad():
                holdout = sum(float(loss_of(P, held[b * args.batch:(b + 1) * args.batch]))
                              for b in range(args.holdout_batches)) / args.holdout_batches
            print("torch %s %s: %d steps in %.0f s" % (path, mode, args.steps,
                                                       time.time() - started), flush=True)
            results[(mode, path)] = (losses, holdout, first)
    return results


def final(losses):
    return sum(losses[-LAST:]) / len(losses[-LAST:])


def smoothed(losses):
    """Each step's mean of the last LAST losses (fewer at the start): one batch's loss swings
    with the trajectory far more than the curve does, and a single batch would set the max."""
    return [sum(losses[max(0, k - LAST + 1):k + 1]) / (k + 1 - max(0, k - LAST + 1))
            for k in range(len(losses))]


def relative(a, b):
    return abs(a - b) / abs(b)


def grad_diff(np, grads, reference):
    """(largest relative difference, its parameter, {parameter: (relative difference, along)}).
    along: the signed part of the difference along the f32 gradient, <g - g32, g32> / |g32|^2
    (negative: the gradient is shorter than f32's), the systematic part of the rounding."""
    per = {}
    for name, g in reference.items():
        g = g.astype(np.float64)
        diff = grads[name].astype(np.float64) - g
        ref = float(np.dot(g.ravel(), g.ravel()))
        per[name] = (float(np.linalg.norm(diff)) / max(math.sqrt(ref), 1e-30),
                     float(np.dot(diff.ravel(), g.ravel())) / max(ref, 1e-60))
    bad = [name for name, d in per.items() if not all(math.isfinite(x) for x in d)]
    worst = bad[0] if bad else max(per, key=lambda n: per[n][0])
    return (math.inf if bad else per[worst][0]), worst, per


# The study's last two lines, figure by figure (a seeds study averages the max_dloss ones).
PARITY_MORE = ("sinter_fp16_max_dloss", "torch_fp16_max_dloss", "max_d_holdout",
               "torch_sdpa_vs_math")
PARITY = ("sinter_bf16_max_dloss", "torch_bf16_max_dloss", "fused_vs_decomposed",
          "torch_eager_vs_compile")


def print_parity(values, more_prefix=""):
    """The parity-more and parity lines of `values` (name → float, or None for na)."""
    def fields(names):
        return " ".join("%s=%s" % (n, "na" if values.get(n) is None else "%.4f" % values[n])
                        for n in names)
    print("parity-more: %s%s" % (more_prefix, fields(PARITY_MORE)))
    print("parity: %s" % fields(PARITY))


def without_options(argv, names):
    """argv less each option of `names` and its value (`--x v` or `--x=v`)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in names:
            skip = True
        elif not any(a.startswith(n + "=") for n in names):
            out.append(a)
    return out


def across_seeds(args):
    """--seeds: the whole study once per seed (this script again, --out DIR/seed-<s>), each run's
    output as it comes, then the figures of its parity lines over the seeds: a row per seed, the
    means of the max_dloss figures, the largest of the others, and how often sinter's bf16 curve
    stayed at least as close to its f32 curve as PyTorch's did."""
    try:
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError:
        sys.exit("amp_parity.py: --seeds takes comma-separated integers, e.g. 0,1,2")
    work = args.out or tempfile.mkdtemp(prefix="amp-parity-")
    rest = without_options(sys.argv[1:], ("--seeds", "--seed", "--out"))
    figures = []  # per seed: name → value (None for na) of its parity-more and parity lines
    for seed in seeds:
        cmd = [sys.executable, os.path.abspath(__file__)] + rest + [
            "--seed", str(seed), "--out", os.path.join(work, "seed-%d" % seed)]
        print("== seed %d: %s" % (seed, " ".join(cmd[1:])), flush=True)
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        found = {}
        for line in child.stdout:
            print(line, end="", flush=True)
            if line.startswith(("parity:", "parity-more:")):
                for pair in line.split()[1:]:
                    name, _, value = pair.partition("=")
                    found[name] = None if value == "na" else float(value)
        if child.wait() != 0 or "sinter_bf16_max_dloss" not in found:
            sys.exit("amp_parity.py: the study with --seed %d failed (exit %d)" % (
                seed, child.returncode))
        figures.append(found)

    def over_seeds(name):  # the max_dloss figures averaged, the others their largest
        vals = [f[name] for f in figures if f.get(name) is not None]
        if not vals:
            return None
        return sum(vals) / len(vals) if name.endswith("max_dloss") else max(vals)

    print("\n%-6s %12s %12s %12s %12s %12s" % ("seed", "sinter_bf16", "torch_bf16", "sinter_fp16",
                                               "torch_fp16", "fused_vs_dec"))
    for seed, f in zip(seeds, figures):
        print("%-6d %12s %12s %12s %12s %12s" % (seed, *(
            "na" if f.get(k) is None else "%.4f" % f[k] for k in (
                "sinter_bf16_max_dloss", "torch_bf16_max_dloss", "sinter_fp16_max_dloss",
                "torch_fp16_max_dloss", "fused_vs_decomposed"))))
    closer = sum(1 for f in figures if f.get("torch_bf16_max_dloss") is not None and
                 f["sinter_bf16_max_dloss"] <= f["torch_bf16_max_dloss"])
    print_parity({n: over_seeds(n) for n in PARITY_MORE + PARITY},
                 "seeds=%s sinter_bf16_closer=%d/%d " % (",".join(map(str, seeds)), closer,
                                                        len(seeds)))
    return 0


def reexec_under_hf_python():
    python = os.environ.get("SINTER_HF_PYTHON")
    if python and os.path.realpath(sys.executable) != os.path.realpath(python) \
            and not os.environ.get("SINTER_HF_REEXEC"):
        os.environ["SINTER_HF_REEXEC"] = "1"
        os.execv(python, [python] + sys.argv)


def main():
    reexec_under_hf_python()
    try:
        import numpy as np
        import torch  # noqa: F401  (imported again where the runs need it)
    except ImportError as e:
        if os.environ.get("SINTER_HF_PYTHON"):
            print("amp_parity.py: %s under SINTER_HF_PYTHON" % e, file=sys.stderr)
            return 1
        print("amp_parity.py: skipped: %s" % e, file=sys.stderr)
        return SKIP
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sinter", default=os.path.join(HERE, "../../build/tests/bench/amp_parity"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--text", help="a text file instead of the fortunes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seeds", help="comma-separated seeds: the study once per seed, then "
                    "the figures over the seeds")
    ap.add_argument("--init", help="start from these weights (amp_parity --save writes them) "
                    "instead of sinter's initialisation with --seed")
    ap.add_argument("--holdout-batches", type=int, default=8)
    ap.add_argument("--out", help="folder for curves.tsv and grads.tsv (default: a new one)")
    ap.add_argument("--no-torch-eager", action="store_true",
                    help="skip PyTorch's eager runs with scaled_dot_product_attention")
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument("--no-torch-math", action="store_true",
                    help="skip PyTorch's decomposed attention runs (eager-math)")
    ap.add_argument("--only", choices=("sinter", "torch"), help="run one library (no parity line)")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="comma-separated subset of off,bf16,fp16 (off is always run)")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the bounds hold")
    ap.add_argument("--check-slack", type=float, default=0.0)
    args = ap.parse_args()

    if args.steps < LAST:
        sys.exit("amp_parity.py: --steps must be at least %d" % LAST)
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        sys.exit("amp_parity.py: unknown --modes %s (use off, bf16, fp16)" % ",".join(unknown))
    args.modes = [m for m in MODES if m == "off" or m in args.modes.split(",")]
    if args.seeds:
        if args.check or args.only or args.init:
            sys.exit("amp_parity.py: --seeds takes neither --check, --only nor --init")
        return across_seeds(args)
    if args.check and (args.modes != list(MODES) or args.no_torch_eager):
        sys.exit("amp_parity.py: --check needs every mode and PyTorch's eager runs (leave --modes "
                 "and --no-torch-eager out)")
    work = args.out or tempfile.mkdtemp(prefix="amp-parity-")
    os.makedirs(work, exist_ok=True)
    text = open(args.text, "rb").read() if args.text else fortune_text()
    train_rows, holdout_rows = make_batches(np, text, args)
    train_rows.tofile(os.path.join(work, "train.bin"))
    holdout_rows.tofile(os.path.join(work, "holdout.bin"))
    if args.init:
        shutil.copyfile(args.init, os.path.join(work, "init.safetensors"))
    else:
        subprocess.run([args.sinter, "--write-init", os.path.join(work, "init.safetensors"),
                        "--seed", str(args.seed)] + model_args(args), check=True)

    runs = {}  # (library, mode, path) → (losses, holdout, first gradients)
    if args.only != "torch":
        for attention in ("fused", "decomposed"):
            for mode in args.modes:
                started = time.time()
                runs[("sinter", mode, attention)] = sinter_run(args, work, mode, attention)
                print("sinter %s %s: %d steps in %.0f s" % (attention, mode, args.steps,
                                                            time.time() - started), flush=True)
    if args.only != "sinter":
        for (mode, path), r in torch_runs(args, work, train_rows, holdout_rows).items():
            runs[("torch", mode, path)] = r

    # The table, the curves and the gradients.
    print("\n%-8s %-10s %-5s %8s %9s %8s %10s %8s %9s  %s" % (
        "library", "path", "amp", "final", "max_dloss", "raw_max", "mean_dloss", "holdout",
        "d_holdout", "grad along f32 (mean); max grad rel diff (parameter)"))
    stats = {}
    grad_rows = []
    worst_grad = {}  # (library, mode) → the largest relative gradient difference of its runs
    for (lib, mode, path), (losses, holdout, grads) in runs.items():
        ref = runs.get((lib, "off", path))
        s = dict(final=final(losses), holdout=holdout, max_dloss=None, raw_max=None,
                 mean_dloss=None, d_holdout=None)
        grad_note = ""
        if ref is not None and mode != "off":
            s["max_dloss"] = max(abs(a - b) for a, b in zip(smoothed(losses), smoothed(ref[0])))
            per_batch = [abs(a - b) for a, b in zip(losses, ref[0])]
            s["raw_max"], s["mean_dloss"] = max(per_batch), sum(per_batch) / len(per_batch)
            s["d_holdout"] = abs(holdout - ref[1])
            worst, where, per = grad_diff(np, grads, ref[2])
            along = sum(a for _, a in per.values()) / len(per)
            grad_note = "%+.5f; %.3g (%s)" % (along, worst, where)
            worst_grad[(lib, mode)] = max(worst, worst_grad.get((lib, mode), 0.0))
            grad_rows += [(lib, path, mode, n, d, a) for n, (d, a) in per.items()]
        stats[(lib, mode, path)] = s
        def cell(key):
            return "-" if s[key] is None else "%.4f" % s[key]
        print("%-8s %-10s %-5s %8.4f %9s %8s %10s %8.4f %9s  %s" % (
            lib, path, mode, s["final"], cell("max_dloss"), cell("raw_max"), cell("mean_dloss"),
            holdout, cell("d_holdout"), grad_note))
    with open(os.path.join(work, "curves.tsv"), "w") as f:
        keys = list(runs)
        f.write("step\t" + "\t".join("%s-%s-%s" % k for k in keys) + "\n")
        for k in range(args.steps):
            f.write("%d\t" % (k + 1) + "\t".join("%.6f" % runs[key][0][k] for key in keys) + "\n")
    with open(os.path.join(work, "grads.tsv"), "w") as f:
        f.write("library\tpath\tamp\tparameter\trelative_difference\talong_f32\n")
        for row in grad_rows:
            f.write("%s\t%s\t%s\t%s\t%.6g\t%.6g\n" % row)
    print("curves and gradients: %s" % work)
    if args.only:
        return 0

    def worst(lib, mode, key):
        vals = [s[key] for (l, m, _), s in stats.items() if l == lib and m == mode and
                s[key] is not None]
        return max(vals) if vals else None

    def paths_apart(lib, a, b):
        vals = [relative(stats[(lib, m, a)]["final"], stats[(lib, m, b)]["final"])
                for m in MODES if (lib, m, a) in stats and (lib, m, b) in stats]
        return max(vals) if vals else None

    a, b = worst("sinter", "bf16", "max_dloss"), worst("torch", "bf16", "max_dloss")
    c, d = paths_apart("sinter", "fused", "decomposed"), paths_apart("torch", "eager", "compile")
    holdouts = [s["d_holdout"] for s in stats.values() if s["d_holdout"] is not None]
    print_parity(dict(zip(PARITY_MORE + PARITY, (
        worst("sinter", "fp16", "max_dloss"), worst("torch", "fp16", "max_dloss"),
        max(holdouts) if holdouts else None, paths_apart("torch", "eager", "eager-math"),
        a, b, c, d))))
    if not args.check:
        return 0
    failures = []
    for (lib, mode, path), (losses, holdout, _) in runs.items():
        if not all(math.isfinite(v) for v in losses + [holdout]):
            failures.append("%s %s %s: a loss is not finite" % (lib, path, mode))
    if a is None or b is None or a > b + args.check_slack:
        failures.append("sinter's bf16 curve is further from its f32 curve than PyTorch's")
    # fp16 against PyTorch's fp16, or (a CPU torch without fp16 autocast) against its bf16:
    # with 3 more mantissa bits and loss scaling it must stay at least as close.
    e = worst("sinter", "fp16", "max_dloss")
    f = worst("torch", "fp16", "max_dloss")
    f = b if f is None else f
    if e is None or f is None or e > f + args.check_slack:
        failures.append("sinter's fp16 curve is further from its f32 curve than PyTorch's")
    if c is None or c > max(d if d is not None else 0.0, 0.01):
        failures.append("sinter's fused and decomposed attention paths disagree")
    if not holdouts or max(holdouts) > 0.02:
        failures.append("a mixed-precision holdout loss is more than 0.02 from its f32 run's")
    for mode in ("bf16", "fp16"):
        ours, theirs = worst_grad.get(("sinter", mode)), worst_grad.get(("torch", mode))
        if theirs is not None and (ours is None or ours > 1.25 * theirs):
            failures.append("sinter's %s gradients at the start are further from f32's (%s) "
                            "than 1.25 x PyTorch's (%.3g)" % (mode, ours, theirs))
    for f in failures:
        print("amp_parity.py: FAILED: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
