#!/usr/bin/env python3
"""tests/install/check_installed_kernel.py — the installed notebook kernel, through jupyter_client:
it starts from the install prefix alone (headers, library, a prelude it precompiles into the
cache once), runs a cell that trains with the DSL, and shuts down.

Usage: check_installed_kernel.py INSTALLED_SINTER_EXE
"""
import os
import subprocess
import sys
import tempfile

prefix = tempfile.mkdtemp(prefix="sinter-installed-kernelspec-")
subprocess.run([sys.argv[1], "kernel", "install", "--prefix", prefix], check=True)
os.environ["JUPYTER_PATH"] = os.path.join(prefix, "share", "jupyter")

from jupyter_client.manager import start_new_kernel  # noqa: E402  (after JUPYTER_PATH)

km, kc = start_new_kernel(kernel_name="sinter", startup_timeout=180)
outputs = []
code = ('auto f = jit([](Var x) -> Var { return exp(x) * 2.0; });\n'
        'HostTensor x = HostTensor::from_doubles(DType::f32, {2}, std::vector<double>{0, 1});\n'
        'std::cout << "installed: " << f(x).at(1) << std::endl;')
try:
    reply = kc.execute_interactive(code, timeout=180, output_hook=outputs.append)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
text = "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")
if reply["content"]["status"] != "ok" or "installed: 5.43" not in text:
    print("FAIL: the installed kernel's cell:", reply["content"], repr(text))
    sys.exit(1)
print("installed kernel:", text.strip())
