#!/usr/bin/env python3
"""tests/profile/check_trace.py DIR [--every-kernel-has-path] — a profile folder as a user opens
it: trace.json parses as JSON in the Chrome trace-event format with the step, phase, kernel,
loader and CPU events; report.html is well-formed HTML with no script; summary.txt has the
phases and at least one verdict line."""
import html.parser
import json
import pathlib
import sys


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


folder = pathlib.Path(sys.argv[1])
every_kernel_has_path = "--every-kernel-has-path" in sys.argv[2:]
trace = json.loads((folder / "trace.json").read_text())
events = trace["traceEvents"]
complete = [e for e in events if e.get("ph") == "X"]
for e in complete:
    for key in ("name", "cat", "pid", "tid", "ts", "dur"):
        if key not in e:
            fail(f"event without {key}: {e}")
    if e["dur"] < 0:
        fail(f"negative duration: {e}")
cats = {e["cat"] for e in complete}
for wanted in ("step", "phase", "kernel", "run", "loader", "compile"):
    if wanted not in cats:
        fail(f"no '{wanted}' events (have {sorted(cats)})")
phases = {e["name"] for e in complete if e["cat"] == "phase"}
for wanted in ("forward", "backward", "optimizer"):
    if wanted not in phases:
        fail(f"no '{wanted}' phase (have {sorted(phases)})")
kernels = [e for e in complete if e["cat"] == "kernel"]
for e in kernels:
    args = e["args"]
    if args["role"] not in ("forward", "backward", "optimizer", "teacher", "collective"):
        fail(f"kernel with role {args['role']}: {e['name']}")
    if args["bytes"] <= 0:
        fail(f"kernel moving no bytes: {e['name']}")
    if every_kernel_has_path and not args["path"]:
        fail(f"kernel with no model path: {e['name']}")
names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
if "main" not in names or not any(n.startswith("loader") for n in names):
    fail(f"threads named {sorted(names)}: want main and loader tracks")
if not any(e.get("ph") == "C" and e["name"] == "cpu use" for e in events):
    fail("no per-core CPU counters")
steps = [e for e in complete if e["cat"] == "step"]
# Each traced step holds its phases, and each phase its kernels.
inside = 0
for k in kernels:
    if any(s["ts"] <= k["ts"] + 1e-3 and k["ts"] + k["dur"] <= s["ts"] + s["dur"] + 1e-3 for s in steps):
        inside += 1
if inside == 0:
    fail("no kernel lies inside a step")


class Checker(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.open = []
        self.scripts = 0
        self.svgs = 0

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self.scripts += 1
        if tag == "svg":
            self.svgs += 1
        if tag not in ("meta", "br", "img", "hr", "link", "input") and not tag.startswith("!"):
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            fail(f"report.html: </{tag}> closes {self.open[-1:] or 'nothing'}")
        self.open.pop()


checker = Checker()
checker.feed((folder / "report.html").read_text())
if checker.open:
    fail(f"report.html leaves {checker.open} open")
if checker.scripts or checker.svgs < 4:
    fail(f"report.html: {checker.scripts} scripts, {checker.svgs} charts")
summary = (folder / "summary.txt").read_text()
if "phases:" not in summary or "verdict:" not in summary:
    fail("summary.txt lacks the phases or a verdict:\n" + summary)
print(f"{folder}: {len(complete)} events, {len(kernels)} kernel events, {len(steps)} steps, "
      f"phases {sorted(phases)}")
