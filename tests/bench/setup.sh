#!/usr/bin/env bash
# tests/bench/setup.sh — the Python peers of the benchmark: a venv at build-bench/venv with
# numpy, JAX (CPU) and a CPU-only PyTorch, all from PyPI.
#
# PyPI's only Linux x86-64 torch wheels are CUDA builds whose dependencies are several GB of
# nvidia-* wheels. Here torch is installed with --no-deps (~540 MB), plus only its pure-Python
# dependencies; the CUDA libraries it links are replaced by tiny generated stubs
# (tests/bench/cuda_stubs.py), so `import torch` and torch.compile work on the CPU.
#
# Idempotent: a venv that passed the checks before is kept (build-bench/venv/.bench-ok).
# Options: --force (reinstall the packages and redo the checks).
# Environment: PYTHON (default python3, >= 3.10), TORCH_SPEC (default torch), JAX_SPEC
# (default jax[cpu]).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="$ROOT/build-bench/venv"
STAMP="$VENV/.bench-ok"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch}"
JAX_SPEC="${JAX_SPEC:-jax[cpu]}"
FORCE=0

for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (known: --force)" >&2; exit 2 ;;
  esac
done

die() { echo "setup.sh: error: $*" >&2; exit 1; }
say() { echo "setup.sh: $*"; }

# The venv's own python (after the venv exists).
PY="$VENV/bin/python"

if [[ $FORCE == 0 && -f "$STAMP" ]] &&
   "$PY" -c 'import numpy, jax, torch; torch.ones(2) @ torch.ones(2)' >/dev/null 2>&1; then
  say "already set up ($(cat "$STAMP")); --force reinstalls"
  exit 0
fi
rm -f "$STAMP"

command -v "$PYTHON" >/dev/null || die "'$PYTHON' not found (set PYTHON=/path/to/python3)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
  die "$PYTHON is $("$PYTHON" --version 2>&1); torch and jax need Python >= 3.10"
for tool in c++ cc readelf nm; do
  command -v "$tool" >/dev/null ||
    die "'$tool' not found: torch.compile needs a C++ compiler and the CUDA stubs need cc," \
        "readelf and nm (Debian: apt-get install g++ binutils)"
done

if [[ ! -x "$PY" ]]; then
  say "creating venv $VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV" ||
    die "could not create the venv (Debian: apt-get install python3-venv)"
fi
PIP=("$PY" -m pip install --disable-pip-version-check --progress-bar off)

start=$SECONDS
say "installing numpy and $JAX_SPEC from PyPI"
"${PIP[@]}" numpy "$JAX_SPEC" || die "pip could not install numpy / $JAX_SPEC"

say "installing $TORCH_SPEC from PyPI without its CUDA dependencies (a ~540 MB wheel)"
"${PIP[@]}" --no-deps "$TORCH_SPEC" || die "pip could not install $TORCH_SPEC"

# torch's own requirements, less the CUDA ones (nvidia-*, cuda-*, triton) and the extras.
mapfile -t deps < <("$PY" - <<'EOF'
import importlib.metadata as md, re
for req in md.requires("torch") or []:
    name = re.split(r"[ ;<>=!~\[]", req, maxsplit=1)[0].lower()
    if "extra ==" in req or name.startswith(("nvidia-", "cuda-")) or name == "triton":
        continue
    print(req.split(";")[0].strip())
EOF
)
say "installing torch's pure-Python dependencies: ${deps[*]}"
say "(pip may report that torch's nvidia-*/cuda-*/triton requirements are not installed: expected)"
"${PIP[@]}" "${deps[@]}" || die "pip could not install torch's dependencies"

TORCH_DIR="$("$PY" - <<'EOF'
import importlib.util, os
print(os.path.dirname(importlib.util.find_spec("torch").origin))
EOF
)"
if [[ -e "$TORCH_DIR/lib/libtorch_cuda.so" ]]; then
  say "replacing the CUDA libraries torch links with CPU-only stubs"
  "$PY" "$ROOT/tests/bench/cuda_stubs.py" "$TORCH_DIR" || die "building the CUDA stubs failed"
fi

say "checking torch (eager)"
"$PY" - <<'EOF' || die "torch does not work (see above)"
import torch
assert float(torch.ones(2) @ torch.ones(2)) == 2.0
assert not torch.cuda.is_available()
print("  torch", torch.__version__, "ok,", torch.get_num_threads(), "threads")
EOF
say "checking torch.compile on the CPU (compiles C++ with $(command -v c++); up to a minute)"
"$PY" - <<'EOF' || die "torch.compile does not work (see above)"
import logging, tempfile, os, torch
torch._logging.set_logs(all=logging.ERROR)
with tempfile.TemporaryDirectory(prefix="sinter-bench-inductor-") as cache:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    f = torch.compile(lambda x, w: torch.relu(x @ w).sum())
    w = torch.ones(4, 4, requires_grad=True)
    y = f(torch.ones(3, 4), w)
    y.backward()
assert float(y.detach()) == 48.0 and float(w.grad.sum()) == 48.0, (y, w.grad)
print("  torch.compile ok")
EOF
say "checking jax"
"$PY" - <<'EOF' || die "jax does not work (see above)"
import jax, jax.numpy as jnp
v, g = jax.jit(jax.value_and_grad(lambda w: jnp.sum(jax.nn.relu(w * 2.0))))(jnp.ones(3))
assert float(v) == 6.0 and float(g.sum()) == 6.0
print("  jax", jax.__version__, "ok on", jax.devices()[0].platform)
EOF

"$PY" -c 'import torch, jax, numpy
print(f"torch {torch.__version__}, jax {jax.__version__}, numpy {numpy.__version__}")' >"$STAMP"
say "done in $((SECONDS - start)) s: $(cat "$STAMP") in $VENV"
