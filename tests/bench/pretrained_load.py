#!/usr/bin/env python3
# tests/bench/pretrained_load.py — a GPT-2-small-sized Hugging Face file from disk to logits:
# sinter (hf_forward) against transformers, each a fresh process, interleaved rounds
"""Usage: pretrained_load.py --forward build/tests/hf_forward [--rounds 3] [--work DIR]
         [--layers 12] [--width 768] [--tokens 64]

Run it with a Python that has torch and transformers (build-ci/hf-venv/bin/python, which
.ci/test makes). Writes a random GPT2LMHeadModel of GPT-2 small's shape (124 M parameters,
vocabulary 50257, context 1024) with save_pretrained, then per round, in this order:
  - sinter: `hf_forward DIR INPUTS OUT` (read config.json, build GPT, load_weights by hf::gpt2,
    compile, one forward over [1, tokens]), a fresh process;
  - transformers: a fresh Python that imports transformers, from_pretrained(DIR) and runs the
    same forward.
Prints each round's seconds, the medians, their ratio and the largest |logit difference|.
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REFERENCE = r"""
import sys, time, torch, transformers
from safetensors.torch import load_file, save_file
torch.set_num_threads({threads})
model = transformers.GPT2LMHeadModel.from_pretrained(sys.argv[1]).eval()
ids = load_file(sys.argv[2])["input_ids"]
with torch.no_grad():
    logits = model(ids).logits
save_file({{"logits": logits.contiguous()}}, sys.argv[3])
"""


def timed(command):
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{command[0]} failed: {done.stderr}")
    return seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--forward", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    import os
    import torch
    import transformers
    from safetensors.torch import load_file, save_file

    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="sinter-pretrained-bench-"))
    folder = work / "gpt2-small"
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=args.layers, n_embd=args.width,
                                     n_head=args.width // 64)
    model = transformers.GPT2LMHeadModel(config)
    parameters = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder, safe_serialization=True)
    del model
    ids = torch.randint(0, config.vocab_size, (1, args.tokens))
    save_file({"input_ids": ids}, str(work / "inputs.safetensors"))
    script = work / "reference.py"
    script.write_text(REFERENCE.format(threads=os.cpu_count()))
    ours_out, theirs_out = work / "sinter.safetensors", work / "transformers.safetensors"
    ours, theirs = [], []
    for r in range(args.rounds):
        t = timed([args.forward, str(folder), str(work / "inputs.safetensors"), str(ours_out)])
        ours.append(t)
        u = timed([sys.executable, str(script), str(folder), str(work / "inputs.safetensors"),
                      str(theirs_out)])
        theirs.append(u)
        print(f"round {r + 1}: sinter {t:.2f} s, transformers {u:.2f} s", flush=True)
    difference = float((load_file(str(ours_out))["logits"] -
                        load_file(str(theirs_out))["logits"]).abs().max())
    print(json.dumps({
        "parameters": parameters,
        "file_bytes": (folder / "model.safetensors").stat().st_size,
        "tokens": args.tokens,
        "sinter_median_s": round(statistics.median(ours), 3),
        "transformers_median_s": round(statistics.median(theirs), 3),
        "sinter_over_transformers": round(statistics.median(ours) / statistics.median(theirs), 3),
        "max_abs_logit_difference": difference,
    }))


if __name__ == "__main__":
    main()
