#!/usr/bin/env python3
"""Interleaved training-step benchmark driver: sinter (train_step --serve) against PyTorch eager,
torch.compile and JAX (train_peers.py --peer P --serve), each a persistent process, alternated in
short rounds so that every contender sees the same machine load; per-round ratios, their median
and spread, and a verdict per peer.

Usage: train_rounds.py --sinter PATH/train_step [--model mlp|vit|gpt|gpt2-small|gpt2-small-tied]
           [--device cpu|cuda] [--threads N] [--peers torch-eager,torch-compile,jax-jit]
           [--rounds R] [--steps K|auto] [--round-seconds S] [--turn-warmup S] [--warmup N]
           [--settle S] [--time-limit S] [--max-spread F] [--tf32] [--amp off|bf16|fp16]
           [--batch N] [--torch-attention sdpa|math] [--out DIR] [--title T] [--no-warm-start]
--tf32, --amp and --batch reach every contender: SINTER_TF32=1 and train_step --amp M --batch N
for sinter (its warm start too), --tf32 --amp M --batch N for the peers (train_peers.py).

Protocol (line-based, each contender's stdin and stdout): the contender compiles, runs its first
call (timed: compile_s) and --warmup untimed steps, then prints
  ready peer=<name> model=<m> compile_s=<s | na> loss=<first step's loss> device=<d>
and then answers `run K W` (W untimed steps, then K timed ones) with `times=<s>,<s>,...` until
`quit`, after which it prints its usual `peer=... median_step_s=... final_loss=... maxrss_mb=...`
line (over every timed step) and exits. Lines that match none of these are ignored.

Schedule: the contenders are started one after another (each compiles alone on the machine,
the others idle, blocked on their stdin). A calibration turn each (`run 5 2`, not counted)
gives step-time estimates, each contender's fastest of the 5 (a burst of load in the
calibration must not shrink K): with --steps auto, K = ceil(--round-seconds / the slowest
contender's estimate), at least 3; W = ceil(--turn-warmup / the fastest contender's
estimate), at least 1. Then R rounds: in round r every contender takes one turn of W + K
steps, in an order rotated by r (after a --settle pause, default none). Rounds stop early, with
a note, once they have taken --time-limit seconds (default 420: a heavily loaded machine slows
torch's steps tenfold). The W untimed steps per turn absorb what the previous turn and the idle
wait leave behind: worker threads of the previous contender still spinning, and a woken
process's slow start (on the 2-core VM, sinter's 2-thread MLP step runs at 1-thread speed for
about 50 ms after 0.2 s or more of idleness). Every contender runs the same number of steps, so
the final losses compare.

Per round r and peer p: ratio_r = median of p's K steps / median of sinter's K steps (> 1:
sinter faster). Over the rounds: the median ratio, the interquartile range (IQR: 25th to 75th
percentile) and min-max. Verdict:
  "sinter faster"  the whole IQR is above 1
  "peer faster"    the whole IQR is below 1
  "inconclusive"   the IQR straddles 1.0, or is wider than --max-spread (default 0.20) times the
                   median ratio (the middle half of the rounds disagrees by more than the +-10%
                   we want to resolve), or fewer than 5 rounds ran.
A difference below --small (default 5%) is marked small: the per-round IQR measures the noise
within one run, and two quiet runs on the 2-core VM moved a ratio by up to 3% (each process
gets its own memory layout and thread placement).
Each contender's first-step loss must equal sinter's (relative 1e-4; a WARNING otherwise) and
its final loss agree to 1% (same number of steps on the same batch). Under --amp bf16|fp16 the
libraries round at different places, so the limits are 2% and 5% (bf16) or 1e-3 and 5% (fp16).

Outputs: the table on stdout, followed by each contender's `peer=...` result line with the
round statistics added (ratio_median, ratio_q25, ratio_q75, ratio_min, ratio_max, rounds,
verdict) and, on every line, the run's settings (amp, batch, tf32: for gpu_table.py, which
keeps runs of one model apart by them; a field the contender printed itself is kept). In --out
DIR (default: a new temporary folder): <model>-rounds.tsv (every round's step times),
<model>-<contender>.stderr, <model>-commands.txt.
"""
import argparse
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from report import (device_peak_mb, fields_of, fmt, num,  # noqa: E402  (shared parsing)
                    print_header)
PEERS = ("torch-eager", "torch-compile", "jax-jit")
MIN_ROUNDS = 5
# Relative tolerance of (first-step loss, final loss) against sinter's, per --amp.
LOSS_TOLERANCE = {"off": (1e-4, 1e-2), "bf16": (2e-2, 5e-2), "fp16": (1e-3, 5e-2)}


def quartiles(values):
    """(25th percentile, median, 75th percentile) of `values`."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def verdict(ratios, max_spread, small):
    """(short word for machines, sentence for people) from the per-round ratios."""
    q1, med, q3 = quartiles(ratios)
    if len(ratios) < MIN_ROUNDS:
        return "inconclusive", "inconclusive: only %d rounds (need %d)" % (len(ratios), MIN_ROUNDS)
    if q3 - q1 > max_spread * med:
        return "inconclusive", ("inconclusive: per-round ratios too spread (IQR %.2f-%.2f is "
                                "%.0f%% of the median, limit %.0f%%)" %
                                (q1, q3, 100 * (q3 - q1) / med, 100 * max_spread))
    faster = med - 1.0 if med >= 1 else 1.0 / med - 1.0  # how much faster the faster one is
    by = "by %.0f%%" % (100 * faster) + (" (small: under %.0f%%)" % (100 * small)
                                          if faster < small else "")
    if q1 > 1.0:
        return "sinter-faster", "sinter faster " + by
    if q3 < 1.0:
        return "peer-faster", "peer faster " + by
    return "inconclusive", "inconclusive: per-round ratios (IQR) span %.2f-%.2f, straddling 1.0" % (
        q1, q3)


class Contender:
    """One persistent benchmark process speaking the protocol above."""

    def __init__(self, name, cmd, env, stderr_path, cpus):
        self.name, self.cmd, self.stderr_path = name, cmd, stderr_path
        self.ready, self.result, self.rounds = {}, {}, []  # rounds: [[step s, ...], ...]
        self.err = open(stderr_path, "w")
        preexec = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, env=env, text=True, bufsize=1,
                                     preexec_fn=preexec)

    def expect(self, prefix):
        """The next protocol line that starts with `prefix`; raises on error= or end of output."""
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait()
                raise RuntimeError("%s exited (status %s) before '%s'; its messages: %s" %
                                   (self.name, self.proc.returncode, prefix.strip(),
                                    self.stderr_path))
            if line.startswith("error="):
                raise RuntimeError("%s: %s" % (self.name, line.strip()))
            if line.startswith(prefix):
                return line.strip()

    def wait_ready(self):
        self.ready = fields_of(self.expect("ready "))

    def run(self, k, w=0):
        """W untimed steps, then K timed ones; the K times in seconds."""
        self.proc.stdin.write("run %d %d\n" % (k, w))
        self.proc.stdin.flush()
        times = [float(t) for t in self.expect("times=")[len("times="):].split(",")]
        if len(times) != k:
            raise RuntimeError("%s answered %d times for run %d" % (self.name, len(times), k))
        return times

    def quit(self):
        """Ends the process; its final `peer=...` line's fields."""
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.result = fields_of(self.expect("peer="))
            if self.proc.wait(timeout=120) != 0:
                say("WARNING: %s exited with status %d after its result line; its messages: %s" %
                    (self.name, self.proc.returncode, self.stderr_path))
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            say("WARNING: %s did not quit cleanly: %s" % (self.name, e))
            self.kill()
        self.err.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def cpu_seconds(pids):
    """(busy CPU seconds of the whole machine, CPU seconds of the processes `pids` and of this
    one), from /proc: their difference over the rounds is what other work took."""
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:]]
    busy = sum(v[:8]) - v[3] - v[4]  # user nice system idle iowait irq softirq steal
    ours = sum(os.times()[:2])
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as fh:
                f = fh.read().rsplit(")", 1)[1].split()
            ours += (int(f[11]) + int(f[12])) / tick  # utime, stime (fields 14, 15)
        except OSError:
            pass
    return busy / tick, ours


def shell_line(cmd, env_vars=()):
    return " ".join(["%s=%s" % (k, shlex.quote(v)) for k, v in env_vars] +
                    [shlex.quote(c) for c in cmd])


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    ap.add_argument("--sinter", required=True, help="the train_step program")
    ap.add_argument("--model",
                    choices=("mlp", "vit", "distill", "distill-vit-b-s", "gpt", "gpt2-small",
                             "gpt2-small-tied"),
                    default="mlp")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peers", help="comma-separated subset of %s (default: all three on the "
                    "CPU, torch-eager,torch-compile on cuda or for GPT)" % ",".join(PEERS))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", default="auto", help="timed steps per contender per round (K)")
    ap.add_argument("--round-seconds", type=float, default=0.5,
                    help="with --steps auto: about how long the slowest contender's K steps take")
    ap.add_argument("--turn-warmup", type=float, default=0.2,
                    help="seconds of untimed steps at the start of every turn (of the fastest "
                    "contender; the same step count for all)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps after the first call")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds of pause before each turn")
    ap.add_argument("--time-limit", type=float, default=420,
                    help="stop after the round that passes this many seconds of rounds")
    ap.add_argument("--max-spread", type=float, default=0.20,
                    help="widest IQR of the per-round ratios, relative to their median, that "
                    "still gives a verdict")
    ap.add_argument("--small", type=float, default=0.05,
                    help="a median ratio closer to 1 than this is marked a small difference")
    ap.add_argument("--tf32", action="store_true",
                    help="f32 GEMMs on TF32 tensor cores on both sides (SINTER_TF32=1, --tf32)")
    ap.add_argument("--amp", choices=("off", "bf16", "fp16"), default="off",
                    help="mixed precision on both sides (train_step --amp, train_peers.py --amp: "
                    "torch.autocast, fp16 with GradScaler); default off: float32")
    ap.add_argument("--batch", type=int,
                    help="sequences per step of the gpt models on both sides (train_step "
                    "--batch, train_peers.py --batch); default: the model's (gpt 32, "
                    "gpt2-small 8)")
    ap.add_argument("--torch-attention", choices=("sdpa", "math"), default="sdpa")
    ap.add_argument("--out", help="folder for the per-round data and the contenders' stderr")
    ap.add_argument("--title", help="the table's title")
    ap.add_argument("--no-warm-start", action="store_true",
                    help="skip timing sinter's warm start (a second process, same cache dir)")
    args = ap.parse_args()
    if (args.threads < 1 or args.rounds < 1 or args.warmup < 0 or args.settle < 0 or
            args.turn_warmup < 0 or args.round_seconds <= 0):
        ap.error("--threads and --rounds must be at least 1, --warmup, --settle and "
                 "--turn-warmup at least 0, --round-seconds positive")
    if args.steps != "auto" and (not args.steps.isdigit() or int(args.steps) < 1):
        ap.error("--steps takes a positive integer or auto")
    if args.batch is not None and (args.batch < 1 or not (args.model.startswith("gpt") or
                                                          args.model == "distill-vit-b-s")):
        ap.error("--batch takes a positive count, for the gpt and distill-vit-b-s models only")
    if args.peers is None:
        gpu_or_gpt = (args.device == "cuda" or args.model.startswith("gpt") or
                      args.model.startswith("distill"))
        args.peers = "torch-eager,torch-compile" + ("" if gpu_or_gpt else ",jax-jit")
    args.peer_list = [p for p in args.peers.split(",") if p]
    args.stopped, args.other_load = None, math.nan
    for p in args.peer_list:
        if p not in PEERS:
            ap.error("unknown peer %r (known: %s)" % (p, ", ".join(PEERS)))
        if p == "jax-jit" and (args.device == "cuda" or args.model.startswith("gpt") or
                               args.model.startswith("distill")):
            ap.error("jax-jit runs on the CPU only and has no GPT or distill model")
        if p == "jax-jit" and args.amp != "off":
            ap.error("jax-jit runs float32 only (no --amp %s)" % args.amp)
    if not os.access(args.sinter, os.X_OK):
        ap.error("--sinter %s is not an executable" % args.sinter)
    return args


def precision_flags(args):
    """--amp and --batch as both train_step and train_peers.py take them (none when default:
    the commands of a float32 run stay as they were)."""
    return ((["--amp", args.amp] if args.amp != "off" else []) +
            (["--batch", str(args.batch)] if args.batch is not None else []))


def sinter_env(args):
    return [("SINTER_TF32", "1")] if args.tf32 else []


def commands(args):
    """[(name, command, extra environment)] for sinter and each peer."""
    common = ["--model", args.model, "--device", args.device, "--threads", str(args.threads),
              "--warmup", str(args.warmup)] + precision_flags(args)
    out = [("sinter", [os.path.abspath(args.sinter)] + common + ["--serve"], sinter_env(args))]
    for p in args.peer_list:
        out.append((p, [sys.executable, os.path.join(HERE, "train_peers.py"), "--peer", p,
                        "--serve"] + common + ["--torch-attention", args.torch_attention] +
                    (["--tf32"] if args.tf32 else []), []))
    return out


def run_settings(args):
    """The run's settings added to every result line (when the contender did not print them):
    amp, batch (the model's own when --batch is not given) and tf32."""
    from train_peers import batch_of  # no torch / jax import at module level
    return {"amp": args.amp, "batch": str(batch_of(args.model, args.batch)),
            "tf32": "1" if args.tf32 else "0"}


def say(msg):
    print("train_rounds.py: " + msg, file=sys.stderr, flush=True)


def start_all(args, out_dir):
    """Starts the contenders one at a time, each compiling alone; returns the ready ones."""
    cpus = sorted(os.sched_getaffinity(0))
    pin = cpus[:args.threads] if args.threads < len(cpus) else None  # Python peers pin themselves
    started = []
    with open(os.path.join(out_dir, "%s-commands.txt" % args.model), "w") as log:
        for name, cmd, extra in commands(args):
            env = dict(os.environ, **dict(extra))
            log.write(shell_line(cmd, extra) + "\n")
            say("%s: starting %s (first call and %d warm-up steps)" % (args.model, name,
                                                                       args.warmup))
            t0 = time.perf_counter()
            stderr_path = os.path.join(out_dir, "%s-%s.stderr" % (args.model, name))
            c = Contender(name, cmd, env, stderr_path, pin if name == "sinter" else None)
            try:
                c.wait_ready()
            except RuntimeError as e:
                c.kill()
                if name == "sinter":
                    for other in started:
                        other.kill()
                    raise
                say("WARNING: %s left out: %s" % (name, e))
                continue
            say("%s: %s ready in %.1f s (first call %s s, loss %s)" %
                (args.model, name, time.perf_counter() - t0, c.ready.get("compile_s"),
                 c.ready.get("loss")))
            started.append(c)
    return started


def run_rounds(args, contenders, out_dir):
    """The calibration turns, then the R rounds; returns (K, W)."""
    times = {c.name: min(c.run(5, 2)) for c in contenders}  # not counted
    if args.steps == "auto":
        k = max(3, math.ceil(args.round_seconds / max(times.values())))
    else:
        k = int(args.steps)
    w = max(1, math.ceil(args.turn_warmup / min(times.values()))) if args.turn_warmup else 0
    say("%s: calibration: %s; %d rounds, each turn %d untimed + %d timed steps" %
        (args.model, ", ".join("%s %.2f ms" % (n, 1e3 * t) for n, t in times.items()),
         args.rounds, w, k))
    start = time.perf_counter()
    pids = [c.proc.pid for c in contenders]
    busy0, ours0 = cpu_seconds(pids)
    with open(os.path.join(out_dir, "%s-rounds.tsv" % args.model), "w") as tsv:
        tsv.write("round\tposition\tcontender\tmedian_s\tstep_times_s\n")
        for r in range(args.rounds):
            if r and time.perf_counter() - start > args.time_limit:
                args.stopped = "stopped after %d of %d rounds: --time-limit %g s" % (
                    r, args.rounds, args.time_limit)
                say("WARNING: %s: %s" % (args.model, args.stopped))
                break
            n = len(contenders)
            order = contenders[r % n:] + contenders[:r % n]
            for pos, c in enumerate(order):
                time.sleep(args.settle)
                try:
                    t = c.run(k, w)
                except RuntimeError as e:
                    if c is contenders[0]:
                        raise
                    say("WARNING: %s left out: it failed in round %d: %s" % (c.name, r + 1, e))
                    c.kill()
                    contenders.remove(c)
                    continue
                c.rounds.append(t)
                tsv.write("%d\t%d\t%s\t%.6g\t%s\n" % (r + 1, pos, c.name, statistics.median(t),
                                                      ",".join("%.6g" % x for x in t)))
            tsv.flush()
            if (r + 1) % 5 == 0 or r + 1 == args.rounds:
                say("%s: round %d/%d" % (args.model, r + 1, args.rounds))
    busy1, ours1 = cpu_seconds(pids)
    wall = time.perf_counter() - start
    args.other_load = max(0.0, (busy1 - busy0) - (ours1 - ours0)) / wall  # cores, on average
    return k, w


def warm_start(args, env_extra):
    """sinter's first call in a second process with the cache the first one filled (s)."""
    cmd = [os.path.abspath(args.sinter), "--model", args.model, "--device", args.device,
           "--threads", str(args.threads), "--warmup", "0", "--iters", "1"] + precision_flags(args)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          env=dict(os.environ, **dict(env_extra)))
    lines = [l for l in proc.stdout.splitlines() if l.startswith("peer=")]
    if proc.returncode != 0:
        say("WARNING: sinter's warm start exited with status %d%s: %s" %
            (proc.returncode, " after its result line" if lines else "", shell_line(cmd)))
    return num(fields_of(lines[-1]), "compile_s") if lines else math.nan


def print_row(cells, widths):
    """The first and the last cell left-aligned, the others right-aligned."""
    last = len(cells) - 1
    print("  ".join(c.ljust(w) if i in (0, last) else c.rjust(w)
                    for i, (c, w) in enumerate(zip(cells, widths))).rstrip())


def report(args, contenders, k, w, warm_s, load):
    """Prints the tables; `load` is the 1-minute load average before the contenders started."""
    sinter = contenders[0]
    base_meds = [statistics.median(t) for t in sinter.rounds]
    title = args.title or "%s training step%s%s" % (
        args.model, ", batch %d" % args.batch if args.batch else "",
        ", %s autocast" % args.amp if args.amp != "off" else "")
    print("%s; %s, %d threads" % (title, args.device, args.threads))
    print("%d rounds; per round each contender takes a turn of %d untimed + %d timed steps, in "
          "an order rotated each round" % (len(base_meds), w, k) +
          (", %.2g s pause before each turn" % args.settle if args.settle else ""))
    print("other work during the rounds: %.2f of %d cores on average (CPU time not used by the "
          "contenders); load average %s before the contenders started" %
          (args.other_load, os.cpu_count(), load))
    if args.stopped:
        print("NOTE: " + args.stopped)
    print()
    gpu = args.device == "cuda"
    header = ("contender", "step ms", "round IQR ms", "first call s", "max RSS MB") + (
        ("GPU peak MB",) if gpu else ()) + ("loss", "final loss")
    widths = (14, 9, 15, 12, 10) + ((11,) if gpu else ()) + (9, 10)
    print_header(header, widths)
    mismatched, drifted = [], []
    first_tol, final_tol = LOSS_TOLERANCE[args.amp]
    for c in contenders:
        meds = [statistics.median(t) for t in c.rounds]
        q1, _, q3 = quartiles(meds)
        step = statistics.median([x for t in c.rounds for x in t])
        loss, final = num(c.ready, "loss"), num(c.result, "final_loss")
        print_row((c.name, fmt(1e3 * step, ".2f"), "%.2f-%.2f" % (1e3 * q1, 1e3 * q3),
                   fmt(num(c.ready, "compile_s"), ".3f"), fmt(num(c.result, "maxrss_mb"), ".0f"))
                  + ((fmt(device_peak_mb(c.result), ".0f"),) if gpu else ())
                  + (fmt(loss, ".6f"), fmt(final, ".6f")), widths)
        base_loss, base_final = num(sinter.ready, "loss"), num(sinter.result, "final_loss")
        if not abs(loss - base_loss) <= first_tol * max(1.0, abs(base_loss)):
            mismatched.append(c.name)
        if not abs(final - base_final) <= final_tol * max(1.0, abs(base_final)):
            drifted.append(c.name)
    print()
    header = ("peer", "ratio", "IQR", "min-max", "won", "verdict")
    widths = (14, 6, 11, 11, 6, 7)
    print_header(header, widths)
    for c in contenders[1:]:
        ratios = [statistics.median(t) / b for t, b in zip(c.rounds, base_meds)]
        q1, med, q3 = quartiles(ratios)
        word, sentence = verdict(ratios, args.max_spread, args.small)
        above = sum(r > 1.0 for r in ratios)
        print_row((c.name, "%.3f" % med, "%.3f-%.3f" % (q1, q3),
                   "%.2f-%.2f" % (min(ratios), max(ratios)), "%d/%d" % (above, len(ratios)),
                   sentence), widths)
        c.result.update(ratio_median="%.4f" % med, ratio_q25="%.4f" % q1, ratio_q75="%.4f" % q3,
                        ratio_min="%.4f" % min(ratios), ratio_max="%.4f" % max(ratios),
                        rounds=str(len(ratios)), round_steps=str(k), verdict=word)
    print()
    print("step = median of all the contender's timed steps; round IQR = 25th-75th percentile of "
          "its per-round medians")
    print("ratio = peer's median step / sinter's median step in the same round (> 1: sinter "
          "faster), median over rounds;")
    print("  IQR and min-max of the per-round ratios; won = rounds in which sinter was faster")
    print("verdict: inconclusive when the IQR straddles 1.0 or is wider than %.0f%% of the median "
          "ratio (or < %d rounds);" % (100 * args.max_spread, MIN_ROUNDS))
    print("  'by N%%' = how much faster: ratio - 1 (sinter) or 1 / ratio - 1 (peer); under %.0f%% "
          "it is small, within the run-to-run variation" % (100 * args.small))
    print("first call = the contender's first step: trace + compile + one step (torch-eager: '-')")
    if gpu:
        print("GPU peak = sinter: planned_peak_mb + state_mb (the compiled step's arena and "
              "outputs, plus parameters and optimizer state); torch: torch.cuda."
              "max_memory_allocated() over the steps after the first call")
    r = sinter.result
    print("sinter memory: planned peak %s MB (arena + outputs) + parameters and AdamW m, v %s MB; "
          "%s parameters" % (fmt(num(r, "planned_peak_mb"), ".2f"), fmt(num(r, "state_mb"), ".2f"),
                             r.get("params", "?")))
    print("sinter compile: first call %s s; warm start %s s (first call of a second process, same "
          "SINTER_CACHE_DIR)" % (fmt(num(sinter.ready, "compile_s"), ".3f"), fmt(warm_s, ".3f")))
    if mismatched:
        print("WARNING: first-step loss differs by > %g (relative) from sinter's for: %s (not the "
              "same model?)" % (first_tol, ", ".join(mismatched)))
    if drifted:
        print("WARNING: final loss differs by > %g%% from sinter's for: %s (optimizer differs?)" %
              (100 * final_tol, ", ".join(drifted)))
    print()
    print("result lines:")
    settings = run_settings(args)
    for c in contenders:
        for key, value in settings.items():
            c.result.setdefault(key, value)
        print(" ".join("%s=%s" % kv for kv in c.result.items()))


def main():
    args = parse_args()
    out_dir = args.out or tempfile.mkdtemp(prefix="sinter-rounds-")
    os.makedirs(out_dir, exist_ok=True)
    load0 = open("/proc/loadavg").read().split()[0]
    try:
        contenders = start_all(args, out_dir)
    except RuntimeError as e:
        say("error: sinter failed: %s" % e)
        return 1
    try:
        k, w = run_rounds(args, contenders, out_dir)
    except (RuntimeError, OSError) as e:
        say("error: %s" % e)
        for c in contenders:
            c.kill()
        return 1
    for c in contenders:
        c.quit()
    warm = math.nan if args.no_warm_start else warm_start(args, sinter_env(args))
    report(args, contenders, k, w, warm, load0)
    print("\ndriver: %s" % shell_line([sys.executable] + sys.argv))
    print("contenders (their messages and the per-round times are in %s):" % out_dir)
    with open(os.path.join(out_dir, "%s-commands.txt" % args.model)) as fh:
        for line in fh:
            print("  " + line.rstrip())
    failed = len(contenders) < 1 + len(args.peer_list)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
