#!/usr/bin/env python3
"""tests/notebook/check_example.py — executes examples/notebooks/train-mlp.ipynb with
`jupyter nbconvert --execute` on the sinter kernel, as a user would, and checks its outputs:
the data set sizes, the progress bar's last state, the loss curve image, the test accuracy and
the tensor table, and that no cell failed.

Usage: check_example.py SINTER_EXE NOTEBOOK   (exit 0: every check passed)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from checks import check, install_kernelspec

sinter_exe, notebook = sys.argv[1], sys.argv[2]
env = dict(os.environ, JUPYTER_PATH=install_kernelspec(sinter_exe))
out_dir = tempfile.mkdtemp(prefix="sinter-notebook-")
subprocess.run(["jupyter", "nbconvert", "--to", "notebook", "--execute",
                "--ExecutePreprocessor.timeout=600", "--output-dir", out_dir,
                "--output", "executed.ipynb", notebook], check=True, env=env)
executed = json.load(open(os.path.join(out_dir, "executed.ipynb")))


def text_of(output):
    if output["output_type"] == "stream":
        return "".join(output["text"])
    if "data" in output:
        return "".join(output["data"].get("text/plain", ""))
    return ""


cells = [c for c in executed["cells"] if c["cell_type"] == "code"]
check(len(cells) == 6, f"{len(cells)} code cells")
for i, cell in enumerate(cells):
    errors = [o for o in cell["outputs"] if o["output_type"] == "error"]
    check(not errors, f"cell {i} failed: {errors}")

check("60000 training images, 10000 test images" in "".join(map(text_of, cells[0]["outputs"])),
      f"the data cell: {cells[0]['outputs']}")

progress = [o for o in cells[2]["outputs"] if o["output_type"] == "display_data"]
check(len(progress) == 1, f"one progress display, updated in place: {cells[2]['outputs']}")
progress_text = text_of(progress[0])
check("training 300/300 (100.0%)" in progress_text, f"the progress bar's end: {progress_text!r}")
check("<progress value=\"300\" max=\"300\"" in "".join(progress[0]["data"]["text/html"]),
      "the progress bar's HTML")
compiled = "".join(text_of(o) for o in cells[2]["outputs"] if o["output_type"] == "stream")
check("sinter: compiled (first call" in compiled, f"the compile line: {compiled!r}")

plot = [o for o in cells[3]["outputs"] if o["output_type"] == "execute_result"]
check(len(plot) == 1 and "image/svg+xml" in plot[0]["data"], f"the loss curve: {cells[3]}")
svg = "".join(plot[0]["data"]["image/svg+xml"])
check(svg.startswith("<svg") and svg.count("<path") == 1, "the loss curve's SVG")
summary = re.search(r"300 points, first ([0-9.]+), last ([0-9.]+)", text_of(plot[0]))
check(summary is not None, f"the curve's summary: {text_of(plot[0])!r}")
first, last = float(summary.group(1)), float(summary.group(2))
check(2.0 < first < 2.6 and last < 0.6, f"the loss falls from ~ln 10: first {first}, last {last}")
print(f"loss: first {first}, last {last}")

accuracy = re.search(r"test accuracy after 300 steps: ([0-9.]+)",
                     "".join(map(text_of, cells[4]["outputs"])))
check(accuracy is not None, f"the accuracy line: {cells[4]['outputs']}")
check(float(accuracy.group(1)) >= 0.80, f"test accuracy {accuracy.group(1)} < 0.80")
print(f"test accuracy: {accuracy.group(1)}")

table = [o for o in cells[5]["outputs"] if o["output_type"] == "execute_result"]
check(table and text_of(table[0]).startswith("f32[500,10]") and
      "<table>" in "".join(table[0]["data"]["text/html"]), f"the logits table: {cells[5]}")
print("the example notebook ran and every check passed")
