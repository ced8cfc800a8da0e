"""tests/notebook/checks.py — what the notebook tests share: a kernelspec installed in a
temporary prefix, and failing with the first broken check."""
import os
import subprocess
import sys
import tempfile


def install_kernelspec(sinter_exe):
    """Installs the `sinter` kernelspec into a temporary prefix; returns its JUPYTER_PATH."""
    prefix = tempfile.mkdtemp(prefix="sinter-kernelspec-")
    subprocess.run([sinter_exe, "kernel", "install", "--prefix", prefix], check=True)
    return os.path.join(prefix, "share", "jupyter")


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)
