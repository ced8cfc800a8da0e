#!/usr/bin/env python3
"""Peers of tests/bench/mlp_step.cpp: one MLP training step (forward + backward) in PyTorch eager,
torch.compile and JAX (jax.jit of jax.value_and_grad), on the CPU.

Model: 784-1024-1024-10 (--small: 784-64-64-10), ReLU hidden layers, mean softmax cross-entropy
with integer labels, float32, batch 256 (--small: 16); gradients of all weights and biases.
Inputs and parameters are the same deterministic pattern as mlp_step.cpp (a sine of the flat
index), so every peer reports the same loss.

Each peer runs in its own child process (so one library's idle worker threads cannot steal
cores from the next), with the thread count fixed before torch / jax is imported.

Prints one machine-readable line per peer:
  peer=<name> compile_s=<first call, s | na> median_step_s=<s> threads=<n> iters=<n> loss=<x>
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

PEERS = ("torch-eager", "torch-compile", "jax-jit")


def sizes(small):
    # (batch, [layer widths])
    return (16, [784, 64, 64, 10]) if small else (256, [784, 1024, 1024, 10])


def pattern(np, shape, scale, phase, offset=0.0):
    """offset + scale * sin(0.9 * i + phase) over the flat index i, float32 (as mlp_step.cpp and
    train_step.cpp make it)."""
    n = math.prod(shape)
    v = offset + scale * np.sin(0.9 * np.arange(n, dtype=np.float64) + phase)
    return v.astype(np.float32).reshape(shape)


def make_inputs(np, small):
    """x, labels, [w1, b1, w2, b2, w3, b3] as numpy arrays."""
    batch, widths = sizes(small)
    x = pattern(np, (batch, widths[0]), 1.0, 0.0)
    labels = (np.arange(batch, dtype=np.int64) * 7) % widths[-1]
    params = []
    for layer in range(len(widths) - 1):
        fan_in, fan_out = widths[layer], widths[layer + 1]
        params.append(pattern(np, (fan_in, fan_out), 1.0 / math.sqrt(fan_in), 1.0 + 2 * layer))
        params.append(pattern(np, (fan_out,), 0.1, 2.0 + 2 * layer))
    return x, labels, params


def limit_threads(threads):
    """Environment for a child running with `threads` threads; call before importing torch/jax."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=%s intra_op_parallelism_threads=%d"
                               % ("true" if threads > 1 else "false", threads)).strip()
    # XLA's CPU client sizes its thread pool from the CPUs this process may run on; restrict
    # them when fewer threads than cores are asked for (the same is done to mlp_step).
    cpus = sorted(os.sched_getaffinity(0))
    if threads < len(cpus):
        os.sched_setaffinity(0, cpus[:threads])


def first_call_then_warmup(step, warmup, sync):
    """The first call, timed (it compiles), then `warmup` more steps: (first-call s, first
    result, last result)."""
    t0 = time.perf_counter()
    first_out = sync(step())
    first = time.perf_counter() - t0
    out = first_out
    for _ in range(warmup):
        out = sync(step())
    return first, first_out, out


def timed(step, warmup, iters, sync):
    """(first-call s, median step s, first result, last result)."""
    first, first_out, out = first_call_then_warmup(step, warmup, sync)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = sync(step())
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times), first_out, out


def protocol_stream():
    """Serve mode's protocol stream: this process's original stdout. Afterwards file descriptor 1
    and sys.stdout go to stderr, so nothing a library prints can land between protocol lines."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


def serve(step, warmup, sync, ready, proto):
    """Serve mode (train_step.cpp's --serve, bench_timing.hpp's serve_steps): the first call
    (timed) and `warmup` more steps, then ready(first-call s, first result), which prints the
    `ready ...` line; then, per line on stdin, `run K [W]` runs W untimed steps (default 0) and
    K timed ones and answers `times=<s>,...` on `proto`, `quit` (or the end of the input) stops.
    Returns timed()'s tuple over every timed step, and their count."""
    first, first_out, out = first_call_then_warmup(step, warmup, sync)
    ready(first, first_out)
    times = []
    for line in sys.stdin:
        words = line.split()
        if words == ["quit"]:
            break
        if (len(words) not in (2, 3) or words[0] != "run" or
                not all(w.isdigit() for w in words[1:]) or int(words[1]) < 1):
            print("error=unknown command '%s' (run K [W] | quit)" % line.strip(), file=proto,
                  flush=True)
            continue
        for _ in range(int(words[2]) if len(words) == 3 else 0):
            out = sync(step())
        this_round = []
        for _ in range(int(words[1])):
            t0 = time.perf_counter()
            out = sync(step())
            this_round.append(time.perf_counter() - t0)
        times += this_round
        print("times=" + ",".join("%.6g" % t for t in this_round), file=proto, flush=True)
    median = statistics.median(times) if times else 0.0
    return (first, median, first_out, out), len(times)


def run_torch(args, compiled):
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    x, labels, params = make_inputs(np, args.small)
    x, labels = torch.from_numpy(x), torch.from_numpy(labels)
    params = [torch.from_numpy(p).requires_grad_() for p in params]

    def loss_fn(x, labels, *p):
        h = x
        for i in range(0, len(p) - 2, 2):
            h = torch.relu(h @ p[i] + p[i + 1])
        return F.cross_entropy(h @ p[-2] + p[-1], labels)

    fn = torch.compile(loss_fn) if compiled else loss_fn

    def step():
        for p in params:
            p.grad = None
        loss = fn(x, labels, *params)
        loss.backward()
        return loss

    # Gradients land in p.grad (computed synchronously on the CPU).
    first, median, _, loss = timed(step, args.warmup, args.iters, lambda out: out)
    assert all(p.grad is not None for p in params)
    return first if compiled else None, median, float(loss.detach())


def run_jax(args):
    import numpy as np
    import jax
    import jax.numpy as jnp

    x, labels, params = make_inputs(np, args.small)
    x, labels = jnp.asarray(x), jnp.asarray(labels.astype(np.int32))
    params = [jnp.asarray(p) for p in params]

    def loss_fn(params, x, labels):
        h = x
        for i in range(0, len(params) - 2, 2):
            h = jax.nn.relu(h @ params[i] + params[i + 1])
        logits = h @ params[-2] + params[-1]
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    fn = jax.jit(jax.value_and_grad(loss_fn))
    first, median, _, out = timed(lambda: fn(params, x, labels), args.warmup, args.iters,
                               jax.block_until_ready)
    return first, median, float(out[0])


def child(args):
    limit_threads(args.threads)
    if args.peer == "jax-jit":
        first, median, loss = run_jax(args)
    else:
        # torch.compile writes its kernels to a cache; a fresh one makes compile_s a cold compile.
        with tempfile.TemporaryDirectory(prefix="sinter-bench-inductor-") as cache:
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache)
            first, median, loss = run_torch(args, args.peer == "torch-compile")
    print("peer=%s compile_s=%s median_step_s=%.6g threads=%d iters=%d loss=%.6f" %
          (args.peer, "na" if first is None else "%.4g" % first, median, args.threads,
           args.iters, loss), flush=True)


def run_each_in_child(script, peers, arguments):
    """Runs `python script --peer P arguments...` for each peer P, each in a process of its own
    (thread settings and imports never leak between peers), and prints each child's result line
    (peer=...), after its step=N loss=L lines (--print-losses) prefixed with the peer's name;
    library warnings stay on stderr. Returns 1 if any peer failed, else 0."""
    failed = 0
    for peer in peers:
        cmd = [sys.executable, os.path.abspath(script), "--peer", peer] + arguments
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("peer=")]
        if proc.returncode != 0 or not lines:
            print("%s: %s failed (exit %d); command: %s" %
                  (os.path.basename(script), peer, proc.returncode, " ".join(cmd)),
                  file=sys.stderr)
            failed += 1
            continue
        for line in proc.stdout.splitlines():
            if line.startswith("step="):
                print("%s %s" % (peer, line))
        print(lines[-1], flush=True)
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps after the first call")
    ap.add_argument("--iters", type=int, default=None, help="timed steps (median reported)")
    ap.add_argument("--small", action="store_true", help="784-64-64-10, batch 16")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of " +
                    ",".join(PEERS))
    ap.add_argument("--peer", help=argparse.SUPPRESS)  # internal: run one peer in this process
    args = ap.parse_args()
    if args.threads < 1:
        ap.error("--threads must be at least 1")
    if args.warmup is None:
        args.warmup = 2 if args.small else 5
    if args.iters is None:
        args.iters = 5 if args.small else 20
    if args.peer:
        return child(args)
    for peer in args.peers.split(","):
        if peer not in PEERS:
            ap.error("unknown peer %r (known: %s)" % (peer, ", ".join(PEERS)))
    return run_each_in_child(__file__, args.peers.split(","),
                             ["--threads", str(args.threads), "--warmup", str(args.warmup),
                              "--iters", str(args.iters)] + (["--small"] if args.small else []))

if __name__ == "__main__":
    sys.exit(main())
