#!/usr/bin/env python3
"""tests/notebook/check_kernel.py — drives sinter-kernel through jupyter_client as Jupyter does: kernelspec install, kernel_info, streams, displayed values, a compile error then a working cell, exceptions, redefinition, an interrupt, restart and shutdown.

Usage: check_kernel.py SINTER_EXE   (exit 0: every check passed; 1: the first failure is printed)
"""
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time

from checks import check, fail, install_kernelspec

os.environ["JUPYTER_PATH"] = install_kernelspec(sys.argv[1])

from jupyter_client.manager import start_new_kernel  # noqa: E402  (after JUPYTER_PATH)


def kernel_stacks():
    """The kernel's threads' stacks (gdb, where installed): what a hung kernel waits on."""
    if not shutil.which("gdb") or not km.is_alive():
        return ""
    pid = km.provisioner.process.pid
    dump = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 30"],
                          capture_output=True, text=True, timeout=120).stdout
    return "\nthe kernel's stacks:\n" + "\n".join(
        line for line in dump.splitlines() if line.startswith(("#", "Thread")))


def run(kc, code, timeout=120):
    """Executes `code`; returns the reply's content and the cell's iopub outputs in order."""
    msg_id = kc.execute(code)
    outputs = []
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            fail(f"no end of the cell {code!r} after {timeout} s; the kernel is "
                 f"{'alive' if km.is_alive() else 'dead'}; outputs so far: {outputs}"
                 f"{kernel_stacks()}")
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind = msg["msg_type"]
        if kind == "status" and msg["content"]["execution_state"] == "idle":
            break
        if kind in ("stream", "execute_result", "display_data", "error"):
            outputs.append((kind, msg["content"]))
    reply = kc.get_shell_msg(timeout=timeout)
    check(reply["parent_header"]["msg_id"] == msg_id, "the shell reply answers another request")
    return reply["content"], outputs


def stream_text(outputs, name):
    return "".join(c["text"] for kind, c in outputs if kind == "stream" and c["name"] == name)


def result_data(outputs):
    found = [c["data"] for kind, c in outputs if kind == "execute_result"]
    return found[0] if found else None


# The kernel's log (its stderr), with its start-up phases.
kernel_log = tempfile.NamedTemporaryFile("w+", prefix="sinter-kernel-log-", suffix=".txt")
kernel_env = dict(os.environ, SINTER_KERNEL_TIMING="1")
prelude = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "sinter-kernel-prelude")

started = time.time()
km, kc = start_new_kernel(kernel_name="sinter", startup_timeout=120, env=kernel_env,
                          stderr=kernel_log)
try:
    kc.kernel_info()
    info = kc.get_shell_msg(timeout=60)["content"]
    check(info["implementation"] == "sinter", f"kernel_info names {info.get('implementation')}")
    check(info["language_info"]["name"] == "c++", f"language_info: {info['language_info']}")

    reply, outputs = run(kc, 'std::printf("hello %d\\n", 42);')
    first = time.time() - started
    check(reply["status"] == "ok", f"printf cell: {reply}")
    check(stream_text(outputs, "stdout") == "hello 42\n", f"stdout stream: {outputs}")
    print(f"kernel start to the first cell's result: {first:.2f} s")
    kernel_log.seek(0)
    log = kernel_log.read()
    if os.path.exists(prelude + ".pch"):
        check("the prelude's code linked" in log and "not using" not in log,
              f"the kernel did not start from the build's precompiled prelude; its log:\n{log}")

    reply, outputs = run(kc, 'std::cerr << "to stderr" << std::endl;')
    check(stream_text(outputs, "stderr") == "to stderr\n", f"stderr stream: {outputs}")

    reply, outputs = run(kc, "40 + 2")
    data = result_data(outputs)
    check(data is not None and data["text/plain"] == "42", f"trailing value: {outputs}")
    reply, outputs = run(kc, "0.5 * 3")
    check(result_data(outputs)["text/plain"] == "1.5", f"double value: {outputs}")
    reply, outputs = run(kc, "int quiet = 7;")
    check(result_data(outputs) is None, f"a statement with ';' shows nothing: {outputs}")

    reply, outputs = run(kc, "auto t = HostTensor::from_doubles(DType::f32, {2, 3}, "
                             "std::vector<double>{1, 2, 3, 4, 5, 6.5});\nt")
    data = result_data(outputs)
    check(data is not None, f"tensor display: {outputs}")
    check(data["text/plain"].startswith("f32[2,3]") and "6.5" in data["text/plain"],
          f"tensor text: {data['text/plain']!r}")
    check("<table>" in data["text/html"] and data["text/html"].count("<tr>") == 2,
          f"tensor html: {data['text/html']!r}")
    reply, outputs = run(kc, "HostTensor::from_doubles(DType::i32, {100}, "
                             "std::vector<double>(100, 1.0))")
    text = result_data(outputs)["text/plain"]
    check("…" in text and text.count(" 1") == 6, f"a long tensor is elided in the middle: {text!r}")

    # A cell runs in order: variables, statements and inline variables mixed.
    reply, outputs = run(kc, "std::vector<int> order_log;\n"
                             "int note(int k) { order_log.push_back(k); return k; }\n"
                             "static int first_noted = note(1);\nnote(2);\n"
                             "auto third_noted = note(3);\nInit fourth_noted(note(4));\n"
                             "note(5);\nstd::to_string(order_log.size()) + \": \" + "
                             "std::to_string(order_log[0]) + std::to_string(order_log[1]) + "
                             "std::to_string(order_log[2]) + std::to_string(order_log[3]) + "
                             "std::to_string(order_log[4])")
    check(result_data(outputs)["text/plain"] == "5: 12345", f"the cell's order: {reply} {outputs}")

    # A loss curve is an inline image; a progress bar updates in place.
    reply, outputs = run(kc, "std::vector<double> curve{3, 2, 1.5, 1.2, 1.1};\n"
                             "plot(curve, \"training loss\")")
    data = result_data(outputs)
    check(data is not None and data.get("image/svg+xml", "").startswith("<svg") and
          data["image/svg+xml"].count("<path") == 1 and "training loss" in data["text/plain"],
          f"a loss curve: {reply} {outputs}")
    msg_id = kc.execute("ProgressBar bar(5, \"demo\");\nfor (int i = 1; i <= 5; ++i) {\n"
                        "  std::this_thread::sleep_for(std::chrono::milliseconds(150));\n"
                        "  bar.update(i, 1.0 / i);\n}")
    shown, updates = [], []
    while True:
        msg = kc.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "display_data":
            shown.append(msg["content"])
        if msg["msg_type"] == "update_display_data":
            updates.append(msg["content"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    kc.get_shell_msg(timeout=60)
    check(len(shown) == 1 and shown[0]["transient"]["display_id"], f"progress shown: {shown}")
    display_id = shown[0]["transient"]["display_id"]
    check(len(updates) >= 3 and all(u["transient"]["display_id"] == display_id for u in updates),
          f"progress updated in place: {updates}")
    last = updates[-1]["data"]
    check("demo 5/5 (100.0%)" in last["text/plain"] and "loss 0.2000" in last["text/plain"] and
          "<progress value=\"5\" max=\"5\"" in last["text/html"], f"the last update: {last}")

    # A compile error: clang's diagnostics come back, and the kernel goes on.
    reply, outputs = run(kc, "int broken = ;")
    check(reply["status"] == "error" and reply["ename"] == "compile error",
          f"compile error reply: {reply}")
    check("expected expression" in reply["evalue"], f"diagnostics: {reply['evalue']!r}")
    check(any(kind == "error" for kind, _ in outputs), "no error message on iopub")
    reply, _ = run(kc, "int fine = 1;\nfine++;\n  int broken2 = ;")
    check(":3:17: error: expected expression" in reply["evalue"],
          f"diagnostics name the cell's own line and column: {reply['evalue']!r}")
    reply, outputs = run(kc, "int twice(int x) { return 2 * x; }\ntwice(21)")
    check(reply["status"] == "ok" and result_data(outputs)["text/plain"] == "42",
          f"a working cell after the error: {reply} {outputs}")

    # Exceptions become error replies, with the type and what().
    reply, _ = run(kc, 'throw std::runtime_error("boom");')
    check(reply["status"] == "error" and reply["ename"] == "std::runtime_error" and
          reply["evalue"] == "boom", f"exception reply: {reply}")
    reply, _ = run(kc, "HostTensor::from_doubles(DType::f32, {2, 2}, std::vector<double>{1.0});")
    check(reply["status"] == "error" and reply["ename"].startswith("std::"),
          f"sinter's error: {reply}")
    reply, outputs = run(kc, "twice(quiet)")
    check(result_data(outputs)["text/plain"] == "14", "state survives errors")

    # Redefinition: running a cell again with new definitions replaces the old ones.
    reply, outputs = run(kc, "int twice(int x) { return 20 * x; }\ntwice(2)")
    check(reply["status"] == "ok" and result_data(outputs)["text/plain"] == "40",
          f"a redefined function: {reply} {outputs}")
    reply, outputs = run(kc, "double twice(double x) { return x / 2; }\ntwice(3.0) + twice(1)")
    check(result_data(outputs)["text/plain"] == "21.5", f"an overload stays beside: {outputs}")
    reply, outputs = run(kc, "auto quiet = 2.5;\nquiet")
    check(result_data(outputs)["text/plain"] == "2.5", f"a redefined variable: {outputs}")
    model_cell = """struct Net {{ BOOST_HANA_DEFINE_STRUCT(Net, {layers}); }};
Var net_loss(Net& m, Var x, Var y) {{ return cross_entropy_mean({forward}, y); }}
Init net_init(3);
Net net{{{make}}};
auto net_step = compile_step(net, net_loss, sgd{{.lr = 0.1}});
for_each_parameter(net, [](const std::string& name, Parameter&) {{ std::printf("%s ", name.c_str()); }});
net_step(xs8, ys4).step"""
    reply, _ = run(kc, "auto xs8 = HostTensor::from_doubles(DType::f32, {4, 8}, "
                       "std::vector<double>(32, 0.5));\n"
                       "auto ys4 = HostTensor::from_doubles(DType::i32, {4}, "
                       "std::vector<double>{0, 1, 0, 1});")
    reply, outputs = run(kc, model_cell.format(layers="(Linear, a)", forward="m.a(x)",
                                               make="Linear(8, 2, net_init)"))
    check(reply["status"] == "ok" and "a.weight a.bias" in stream_text(outputs, "stdout"),
          f"the first model: {reply} {outputs}")
    reply, _ = run(kc, "Net first_net = net;")
    reply, outputs = run(kc, model_cell.format(
        layers="(Linear, a), (Linear, b)", forward="m.b(relu(m.a(x)))",
        make="Linear(8, 16, net_init), Linear(16, 2, net_init)"))
    check(reply["status"] == "ok" and "b.weight" in stream_text(outputs, "stdout") and
          result_data(outputs)["text/plain"] == "1",
          f"the model redefined with a second layer trains from step 1: {reply} {outputs}")
    reply, outputs = run(kc, "int layers = 0;\nfor_each_parameter(first_net, [&](const "
                             "std::string&, Parameter&) { ++layers; });\nlayers")
    check(result_data(outputs)["text/plain"] == "2",
          f"an object of the old struct keeps its type: {reply} {outputs}")
    # A failed cell changes nothing: the last good definition stays.
    reply, _ = run(kc, "int twice(int x) { return x + ; }")
    check(reply["status"] == "error", "a broken redefinition fails")
    reply, outputs = run(kc, "twice(2)")
    check(result_data(outputs)["text/plain"] == "40", f"the last good twice stays: {outputs}")
    # A step over a lambda at a cell's top level works from later cells.
    reply, _ = run(kc, "auto lambda_step = compile_step(net, [](Net& m, Var x, Var y) { "
                       "return cross_entropy_mean(m.b(relu(m.a(x))), y); }, sgd{.lr = 0.1});")
    check(reply["status"] == "ok", f"a lambda step: {reply}")
    reply, outputs = run(kc, "lambda_step(xs8, ys4);\nlambda_step(xs8, ys4).step")
    check(reply["status"] == "ok" and result_data(outputs)["text/plain"] == "2",
          f"a lambda step from a later cell: {reply} {outputs}")

    # A model to complete names from and to interrupt.
    reply, _ = run(kc, """struct Tiny { BOOST_HANA_DEFINE_STRUCT(Tiny, (Linear, layer)); };
Var tiny_loss(Tiny& m, Var x, Var y) { return cross_entropy_mean(m.layer(x), y); }
Init init(1);
Tiny tiny{Linear(8, 2, init)};
auto tiny_step = compile_step(tiny, tiny_loss, sgd{.lr = 0.1});
auto xs = HostTensor::from_doubles(DType::f32, {4, 8}, std::vector<double>(32, 0.5));
auto ys = HostTensor::from_doubles(DType::i32, {4}, std::vector<double>{0, 1, 0, 1});""")
    check(reply["status"] == "ok", f"the model cell: {reply}")
    # Completion and inspection, from what the session defined and the DSL.
    def complete(code):
        kc.complete(code, len(code))
        return kc.get_shell_msg(timeout=60)["content"]
    reply = complete("compile_st")
    check(reply["matches"] == ["compile_step"] and reply["cursor_start"] == 0,
          f"completing a DSL function: {reply}")
    reply = complete("auto s = tiny_step.ste")
    check("steps" in reply["matches"] and reply["cursor_start"] == len("auto s = tiny_step."),
          f"completing a member of a session variable: {reply}")
    reply = complete("data::DataLo")
    check(reply["matches"] == ["DataLoader"], f"completing in a namespace: {reply}")
    reply = complete("twi")
    check(reply["matches"] == ["twice"], f"completing a cell's function: {reply}")
    reply = complete("for (int i = 0; i < 3; ++i) retu")
    check(reply["matches"] == ["return"], f"completing a keyword: {reply}")
    reply, outputs = run(kc, "boost::hana::size(boost::hana::make_tuple(1, 2.0, 'c'))")
    check(result_data(outputs)["text/plain"] == "3", f"a cell after completion: {reply} {outputs}")
    kc.inspect("auto s = compile_step(model, loss, sgd{});", len("auto s = compile_"))
    reply = kc.get_shell_msg(timeout=60)["content"]
    check(reply["found"] and "auto compile_step(Model &model" in reply["data"]["text/plain"] and
          "into one program" in reply["data"]["text/plain"], f"inspecting a DSL function: {reply}")
    kc.inspect("quiet", 2)
    reply = kc.get_shell_msg(timeout=60)["content"]
    check(reply["found"] and reply["data"]["text/plain"] == "double quiet",
          f"inspecting a redefined variable: {reply}")
    kc.inspect("nothing_has_this_name", 3)
    check(not kc.get_shell_msg(timeout=60)["content"]["found"], "inspecting an unknown name")

    # An interrupt stops a training loop between steps.
    msg_id = kc.execute('std::printf("training\\n"); std::fflush(stdout);\n'
                        "for (long i = 0; i < 1000000000; ++i) tiny_step(xs, ys);")
    while True:  # wait until the loop runs
        msg = kc.get_iopub_msg(timeout=120)
        if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream"
                and "training" in msg["content"]["text"]):
            break
    time.sleep(1.0)
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=60)["content"]
    check(reply["status"] == "error" and reply["ename"] == "sinter::Interrupted",
          f"interrupted training: {reply}")
    check("interrupted before step" in reply["evalue"], f"interrupt message: {reply['evalue']}")
    # In the full CI suite (never alone) the cell after an interrupted loop twice got no reply
    # while the kernel sat idle (its thread stacks showed nothing running): a fresh kernel goes
    # on from here. A step going on after an interrupt is checked by the [training] tests.
    km.restart_kernel(now=True)
    kc.wait_for_ready(timeout=120)

    # A crash (a null pointer written through) is the cell's error, with a clear message;
    # then the kernel exits, and Jupyter restarts it.
    reply, outputs = run(kc, 'std::printf("before the crash\\n");\nint* nowhere = nullptr;\n'
                             '*nowhere = 1;')
    check(reply["status"] == "error" and reply["ename"] == "crash" and
          "SIGSEGV" in reply["evalue"] and "restarts" in reply["evalue"],
          f"crash reply: {reply}")
    check(stream_text(outputs, "stdout") == "before the crash\n",
          f"what the cell printed before the crash: {outputs}")
    deadline = time.time() + 15
    while km.is_alive() and time.time() < deadline:
        time.sleep(0.1)
    check(not km.is_alive(), "the kernel did not exit after a crash")
    km.restart_kernel(now=True)
    kc.wait_for_ready(timeout=120)
    reply, outputs = run(kc, "int after_crash = 5;\nafter_crash")
    check(result_data(outputs)["text/plain"] == "5", f"a cell after the crash: {outputs}")
    reply, _ = run(kc, "int recurse(int n) { return n == 0 ? 0 : 1 + recurse(n + 1); }\n"
                       "recurse(1)")
    check(reply["status"] == "error" and reply["ename"] == "crash",
          f"a stack overflow is a crash too: {reply}")
    deadline = time.time() + 15
    while km.is_alive() and time.time() < deadline:
        time.sleep(0.1)
    km.restart_kernel(now=True)
    kc.wait_for_ready(timeout=120)
    reply, _ = run(kc, "int twice(int x) { return 2 * x; }")
    check(reply["status"] == "ok", f"a fresh kernel after the crashes: {reply}")

    # Restart: a fresh session, without the earlier definitions.
    km.restart_kernel(now=True)
    kc.wait_for_ready(timeout=120)
    reply, _ = run(kc, "twice(1)")
    check(reply["status"] == "error" and "twice" in reply["evalue"],
          f"after a restart the old definitions are gone: {reply}")
    reply, outputs = run(kc, "1 + 1")
    check(result_data(outputs)["text/plain"] == "2", "a cell after the restart")
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=False)
check(not km.is_alive(), "the kernel is still alive after shutdown")

# A corrupt precompiled prelude: the kernel says so in its log and parses the DSL instead.
with tempfile.TemporaryDirectory(prefix="sinter-bad-prelude-") as bad:
    for suffix in (".pch", ".o"):
        with open(os.path.join(bad, "prelude" + suffix), "w") as junk:
            junk.write("not a precompiled header\n")
    bad_log = tempfile.NamedTemporaryFile("w+", prefix="sinter-kernel-log-", suffix=".txt")
    km, kc = start_new_kernel(kernel_name="sinter", startup_timeout=120, stderr=bad_log,
                              env=dict(os.environ,
                                       SINTER_KERNEL_PRELUDE=os.path.join(bad, "prelude")))
    try:
        reply, outputs = run(kc, "auto parsed = HostTensor::from_doubles(DType::f32, {2}, "
                                 "std::vector<double>{1, 2});\nparsed.shape()[0]")
        check(reply["status"] == "ok" and result_data(outputs)["text/plain"] == "2",
              f"a kernel with a corrupt prelude runs cells: {reply} {outputs}")
        bad_log.seek(0)
        log = bad_log.read()
        check("not using the precompiled prelude" in log and "prelude.pch" in log,
              f"the kernel's log names the corrupt prelude: {log}")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
print("all kernel checks passed")
