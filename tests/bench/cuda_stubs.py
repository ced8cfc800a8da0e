#!/usr/bin/env python3
"""Build CPU-only stand-ins for the CUDA libraries that PyPI's Linux x86-64 torch wheel links.

PyPI only has CUDA builds of torch for Linux x86-64; their shared objects list libcudart,
libcublas, libcudnn, libnccl, ... as DT_NEEDED, so `pip install torch --no-deps` without the
multi-GB nvidia-* wheels fails at `import torch` ("libcufile.so.0: cannot open shared object").
The benchmark only uses torch on the CPU, so every CUDA library can be a tiny stub: this script
reads the torch wheel's ELF files, finds each CUDA library they need and every symbol (with its
symbol version) they import from it, and builds one stub .so per library with that SONAME.

Each stub function returns 100 (cudaErrorNoDevice: torch then reports no CUDA device); the
*GetErrorString / *GetErrorName ones return a message; cudaGetDeviceCount sets its count to 0.
The stubs go into an nvidia/.../lib directory on the wheel's RPATH (where the nvidia-*
wheels would have put the real ones, e.g. <site-packages>/nvidia/cu13/lib), which the loader
searches before LD_LIBRARY_PATH and the system, so a CUDA toolkit that happens to be installed
is never mixed in. Nothing here is ever called on a CPU-only run.

Usage: python cuda_stubs.py <torch package dir> [<output dir>]
"""
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

CUDA_LIB = re.compile(
    r"^lib(cuda|cudart|cublas|cublasLt|cusparse|cusparseLt|cufft|cufile|curand|cusolver|nccl|"
    r"cudnn\w*|nvrtc|nvshmem_host|cupti|nvJitLink|nvToolsExt|nvperf_host|nvidia-ml)\.so(\.\d+)*$")
# Unversioned imports from these prefixes are CUDA's (the libraries torch links are not all
# symbol-versioned, e.g. cusparseLt, cufile, nccl, nvshmem).
CUDA_PREFIX = re.compile(r"^(cu|nccl|nvshmem|nvrtc|cudnn|nvtx|nvml|cupti|__cuda|__nvJitLink|nvJitLink)")


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def default_out_dir(torch_dir):
    """The first $ORIGIN-relative nvidia/ directory on libtorch_cpu.so's RPATH, else torch/lib."""
    lib_dir = os.path.join(torch_dir, "lib")
    dynamic = run(["readelf", "-d", os.path.join(lib_dir, "libtorch_cpu.so")])
    m = re.search(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[(.*)\]", dynamic)
    entries = [e for e in (m.group(1).split(":") if m else [])
               if e.startswith("$ORIGIN") and "/nvidia/" in e]
    # Prefer the toolkit's own directory (nvidia/cu13/lib) over cudnn/, nccl/, ...
    entries.sort(key=lambda e: not re.search(r"/nvidia/cu\d+/lib$", e))
    return os.path.normpath(entries[0].replace("$ORIGIN", lib_dir)) if entries else lib_dir


def main():
    torch_dir = os.path.abspath(sys.argv[1])
    out_dir = sys.argv[2] if len(sys.argv) > 2 else default_out_dir(torch_dir)
    elfs = sorted(glob.glob(os.path.join(torch_dir, "lib", "*.so*")) +
                  glob.glob(os.path.join(torch_dir, "_C*.so")))
    needed = set()
    defined = set()
    for f in elfs:
        for line in run(["readelf", "-d", f]).splitlines():
            m = re.search(r"\(NEEDED\)\s+Shared library: \[(.+)\]", line)
            if m and CUDA_LIB.match(m.group(1)):
                needed.add(m.group(1))
        for line in run(["nm", "-D", "--defined-only", f]).splitlines():
            parts = line.split()
            if len(parts) == 3:
                defined.add(parts[2].split("@")[0])
    if not needed:
        print("cuda_stubs: torch links no CUDA library; nothing to do")
        return
    # versioned[soname][version] = {symbols}; unversioned = {symbols}. A symbol version's
    # library comes from the ELF's version-needs section (e.g. NVSHMEM -> libnvshmem_host.so.3).
    versioned = collections.defaultdict(lambda: collections.defaultdict(set))
    unversioned = set()
    for f in elfs:
        owner_of, current = {}, None
        for line in run(["readelf", "-V", "--wide", f]).splitlines():
            m = re.search(r"File: (\S+)", line)
            if m:
                current = m.group(1)
                continue
            m = re.search(r"Name: (\S+)", line)
            if m and current in needed:
                owner_of[m.group(1)] = current
        for line in run(["nm", "-D", "--undefined-only", f]).splitlines():
            sym = line.split()[-1]
            if "@" in sym:
                name, ver = sym.split("@", 1)
                ver = ver.lstrip("@")
                if ver in owner_of:
                    versioned[owner_of[ver]][ver].add(name)
            elif CUDA_PREFIX.match(sym) and sym not in defined:
                unversioned.add(sym)
    os.makedirs(out_dir, exist_ok=True)
    cc = os.environ.get("CC", "cc")
    first = sorted(needed)[0]
    with tempfile.TemporaryDirectory() as tmp:
        for soname in sorted(needed):
            syms = {name: ver for ver, names in versioned[soname].items() for name in names}
            plain = sorted(unversioned - set(syms)) if soname == first else []
            src = ["/* generated by tests/bench/cuda_stubs.py: CPU-only stand-in for %s */" % soname]
            for name in sorted(set(syms) | set(plain)):
                if name.endswith("GetErrorString") or name.endswith("GetErrorName"):
                    src.append('const char* %s(void) { return "CUDA stub (CPU-only torch)"; }' % name)
                elif name == "cudaGetDeviceCount":
                    src.append("int %s(int* n) { if (n) *n = 0; return 100; }" % name)
                else:
                    src.append("long %s(void) { return 100; }" % name)
            c_path = os.path.join(tmp, soname + ".c")
            with open(c_path, "w") as fh:
                fh.write("\n".join(src) + "\n")
            cmd = [cc, "-shared", "-fPIC", "-O0", "-w", "-o", os.path.join(out_dir, soname),
                   c_path, "-Wl,-soname," + soname]
            if syms:
                vs = os.path.join(tmp, soname + ".map")
                with open(vs, "w") as fh:
                    for ver, names in sorted(versioned[soname].items()):
                        fh.write("%s { global: %s; };\n" % (ver, "; ".join(sorted(names))))
                    if plain:
                        fh.write("STUB_PLAIN { global: %s; };\n" % "; ".join(plain))
                cmd.append("-Wl,--version-script=" + vs)
            run(cmd)
            print("cuda_stubs: %-22s %4d symbols" % (soname, len(syms) + len(plain)))


if __name__ == "__main__":
    main()
