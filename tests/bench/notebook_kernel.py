#!/usr/bin/env python3
"""tests/bench/notebook_kernel.py — the notebook kernel's goals, measured through jupyter_client
as Jupyter drives it: kernel start to the first cell's result (goal < 3 s), and the kernel's
memory growth over 100 cells in a row (goal < 200 MB), for light cells and for cells that each
define, compile and train a new model type.

Usage: /usr/bin/python3 tests/bench/notebook_kernel.py build/sinter [CELLS]   (prints one line
per measurement; no pass/fail: the numbers go into docs/perf.md)
"""
import os
import subprocess
import sys
import tempfile
import time

sinter_exe = sys.argv[1]
cells = int(sys.argv[2]) if len(sys.argv) > 2 else 100
prefix = tempfile.mkdtemp(prefix="sinter-kernelspec-")
subprocess.run([sinter_exe, "kernel", "install", "--prefix", prefix], check=True,
               stdout=subprocess.DEVNULL)
os.environ["JUPYTER_PATH"] = os.path.join(prefix, "share", "jupyter")
from jupyter_client.manager import KernelManager  # noqa: E402  (after JUPYTER_PATH)

LIGHT = ("int light_fn{i}(int x) {{ return x + {i}; }}\n"
         "auto light_tensor{i} = HostTensor::from_doubles(DType::f32, {{4, 4}}, "
         "std::vector<double>(16, {i}.0));\nlight_fn{i}(1)")
MODEL = ("struct M{i} {{ BOOST_HANA_DEFINE_STRUCT(M{i}, (Linear, a), (Linear, b)); }};\n"
         "Var loss{i}(M{i}& m, Var x, Var y) {{ return cross_entropy_mean(m.b(relu(m.a(x))), y); }}\n"
         "Init init{i}({i});\nM{i} m{i}{{Linear(8, 16, init{i}), Linear(16, 2, init{i})}};\n"
         "auto step{i} = compile_step(m{i}, loss{i}, sgd{{.lr = 0.1}});\n"
         "for (int k = 0; k < 5; ++k) step{i}(xs, ys);\nstep{i}.steps()")
DATA = ("auto xs = HostTensor::from_doubles(DType::f32, {4, 8}, std::vector<double>(32, 0.5));\n"
        "auto ys = HostTensor::from_doubles(DType::i32, {4}, std::vector<double>{0, 1, 0, 1});")


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run(km, kc, code):
    reply = kc.execute_interactive(code, timeout=300, output_hook=lambda msg: None)
    if reply["content"]["status"] != "ok":
        km.shutdown_kernel(now=True)
        sys.exit(f"cell failed: {reply['content']}")


def session(kind, template):
    started = time.time()
    km = KernelManager(kernel_name="sinter")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    run(km, kc, "1 + 1")
    first = time.time() - started
    pid = km.provisioner.process.pid
    run(km, kc, DATA)
    base = rss_mb(pid)
    t0 = time.time()
    for i in range(cells):
        run(km, kc, template.format(i=i))
    seconds = time.time() - t0
    grown = rss_mb(pid) - base
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    print(f"{kind}: start to first result {first:.2f} s; {cells} cells grow the kernel by "
          f"{grown:.0f} MB ({grown / cells:.2f} MB a cell) in {seconds:.1f} s", flush=True)


session("light cells", LIGHT)
session("new-model cells", MODEL)
