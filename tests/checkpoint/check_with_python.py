#!/usr/bin/env python3
# tests/checkpoint/check_with_python.py — the reference `safetensors` package reads what sinter writes
"""Checks checkpoints written by tests/checkpoint/write_sample.cpp with the `safetensors` package.

Usage: check_with_python.py [--writer WRITE_SAMPLE] FILE [FILE ...]

With --writer, the sample files are written first: FILE with every dtype, and FILE with
".numpy" before its suffix without BF16 (numpy has no bfloat16). Each file is then
  - parsed by the reference implementation (`safetensors.deserialize`, raw bytes),
  - loaded with `safetensors.numpy.load_file` (tensor by tensor via `safe_open` when it holds BF16),
  - loaded with `safetensors.torch.load_file` when torch is importable,
and compared with the expected names, dtypes, shapes, values and metadata; finally the reference
writer (`safetensors.numpy.save` / `safetensors.torch.save`) must produce the same bytes.
Exits 77 (meson's SKIP) when safetensors or numpy is missing. With SINTER_INTEROP_PYTHON set
(CI sets it to the venv .ci/setup made), the check runs under that interpreter and a missing
package is a failure, not a skip.
"""
import argparse
import os
import pathlib
import subprocess
import sys

SKIP = 77

# Mirrors write_sample.cpp: (name, safetensors dtype, shape).
TABLE = [
    ("f32.matrix", "F32", (2, 3)),
    ("f32.scalar", "F32", ()),
    ("f32.empty", "F32", (0, 3)),
    ("f64.vector", "F64", (4,)),
    ("bf16.matrix", "BF16", (3, 2)),
    ("f16.vector", "F16", (5,)),
    ("i32.matrix", "I32", (2, 2)),
    ("i64.scalar", "I64", ()),
    ("i64.vector", "I64", (3,)),
    ("bool.vector", "BOOL", (5,)),
]
NOTE = ' dtypes; "quoted", back\\slash, tab\t, café ✓'


def sample_value(dtype, i):
    """Element i of a sample tensor, as in write_sample.cpp."""
    if dtype == "I32":
        return i * 7 - 10
    if dtype == "I64":
        return (i + 1) * 2**40 + 3
    if dtype == "BOOL":
        return i % 3 == 0
    return (i - 2) * 0.5


def expected_tensors(numpy_only):
    return {name: (dtype, shape) for name, dtype, shape in TABLE
            if not (numpy_only and dtype == "BF16")}


def expected_values(dtype, shape):
    count = 1
    for d in shape:
        count *= d
    return [sample_value(dtype, i) for i in range(count)]


class Checker:
    def __init__(self, path):
        self.path = path
        self.failures = []

    def expect(self, condition, what):
        if not condition:
            self.failures.append(f"{self.path}: {what}")

    def compare(self, reader, name, dtype, shape, values):
        """values: a flat Python list read back by `reader`."""
        want_dtype, want_shape = self.expected[name]
        self.expect(dtype == want_dtype, f"{reader}: {name} dtype {dtype}, want {want_dtype}")
        self.expect(tuple(shape) == want_shape,
                    f"{reader}: {name} shape {tuple(shape)}, want {want_shape}")
        want = expected_values(want_dtype, want_shape)
        self.expect(list(values) == want, f"{reader}: {name} values {list(values)}, want {want}")


def numpy_dtype_name(np, array):
    return {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64",
            np.dtype(np.float16): "F16", np.dtype(np.int32): "I32",
            np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL"}.get(array.dtype, str(array.dtype))


def check_file(path, np, safetensors, torch):
    c = Checker(path)
    data = pathlib.Path(path).read_bytes()
    with safetensors.safe_open(path, framework="np") as f:
        metadata = f.metadata() or {}
        names = set(f.keys())
    sample = metadata.get("sinter.sample", "")
    numpy_only = sample.startswith("numpy")
    c.expected = expected_tensors(numpy_only)
    c.expect(metadata == {"sinter.sample": ("numpy" if numpy_only else "all") + NOTE},
             f"metadata {metadata!r}")
    c.expect(names == set(c.expected), f"names {sorted(names)}, want {sorted(c.expected)}")

    # 1. The reference parser, raw bytes decoded here (covers BF16 without torch).
    raw_formats = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I32": "<i4", "I64": "<i8",
                   "BOOL": "?"}
    for name, view in safetensors.deserialize(data):
        if view["dtype"] == "BF16":
            bits = np.frombuffer(bytes(view["data"]), dtype="<u2").astype(np.uint32) << 16
            values = bits.view(np.float32)
        else:
            values = np.frombuffer(bytes(view["data"]), dtype=raw_formats.get(view["dtype"], "u1"))
        c.compare("deserialize", name, view["dtype"], view["shape"], values.tolist())

    # 2. numpy (load_file needs every dtype to exist in numpy, so not with BF16).
    import safetensors.numpy
    if "BF16" in {dtype for dtype, _ in c.expected.values()}:
        with safetensors.safe_open(path, framework="np") as f:
            arrays = {name: f.get_tensor(name) for name in f.keys()
                      if c.expected.get(name, ("",))[0] != "BF16"}
        reader = "numpy safe_open"
    else:
        arrays = safetensors.numpy.load_file(path)
        reader = "numpy load_file"
    for name, array in arrays.items():
        c.compare(reader, name, numpy_dtype_name(np, array), array.shape, array.ravel().tolist())
    if numpy_only:
        rewritten = safetensors.numpy.save(arrays, metadata=metadata)
        c.expect(rewritten == data, "safetensors.numpy.save writes different bytes for the same "
                 "tensors and metadata")

    # 3. torch, every dtype.
    if torch is not None:
        import safetensors.torch
        torch_names = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16",
                       torch.float16: "F16", torch.int32: "I32", torch.int64: "I64",
                       torch.bool: "BOOL"}
        tensors = safetensors.torch.load_file(path)
        for name, t in tensors.items():
            c.compare("torch load_file", name, torch_names.get(t.dtype, str(t.dtype)),
                      tuple(t.shape), t.reshape(-1).tolist())
        rewritten = safetensors.torch.save(tensors, metadata=metadata)
        c.expect(rewritten == data, "safetensors.torch.save writes different bytes for the same "
                 "tensors and metadata")
    return c.failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writer", help="write_sample executable to run first")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()

    required_python = os.environ.get("SINTER_INTEROP_PYTHON")
    if required_python and not os.environ.get("SINTER_INTEROP_REEXEC"):
        if not os.access(required_python, os.X_OK):
            print(f"FAIL: SINTER_INTEROP_PYTHON={required_python} is not an executable "
                  "(run .ci/setup, which creates it)")
            return 1
        env = dict(os.environ, SINTER_INTEROP_REEXEC="1")
        return subprocess.run([required_python, *sys.argv], env=env).returncode
    try:
        import numpy as np
        import safetensors
        import safetensors.numpy  # noqa: F401
    except ImportError as e:
        if required_python:
            print(f"FAIL: {required_python} cannot import {e.name} (run .ci/setup)")
            return 1
        print("skipped: safetensors not installed (needs the safetensors and numpy packages)")
        return SKIP
    try:
        import torch
    except ImportError:
        torch = None

    files = list(args.files)
    if args.writer:
        for file in args.files:
            path = pathlib.Path(file)
            numpy_file = path.with_name(path.stem + ".numpy" + path.suffix)
            subprocess.run([args.writer, file], check=True)
            subprocess.run([args.writer, "--numpy-only", str(numpy_file)], check=True)
            files.append(str(numpy_file))

    failures = []
    for file in files:
        failures += check_file(file, np, safetensors, torch)
    readers = "deserialize, numpy" + (f", torch {torch.__version__}" if torch else "")
    print(f"safetensors {safetensors.__version__}; readers: {readers}; files: {', '.join(files)}")
    if torch is None:
        print("note: torch not installed, so the torch check was skipped")
    for failure in failures:
        print("FAIL", failure)
    if not failures:
        print("ok: every reader agrees with what sinter wrote, and the reference writer "
              "reproduces the same bytes")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
