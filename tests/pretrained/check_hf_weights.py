#!/usr/bin/env python3
# tests/pretrained/check_hf_weights.py — sinter's forward on Hugging Face files matches transformers
"""Writes small random GPT-2, ViT, BERT and RoBERTa models with `transformers`, runs sinter's
forward on the same inputs through hf_forward, and compares the outputs to 1e-4 (f32).

Usage: check_hf_weights.py --forward HF_FORWARD --work DIR [--distill DISTILL [--data DIR]]

Every weight is perturbed after initialisation (transformers starts biases at 0 and LayerNorm
gains at 1, which would hide a bias or gain read from the wrong tensor). Cases:
  gpt2           GPT2LMHeadModel, tied head, logits
  gpt2-untied    tie_word_embeddings=False: lm_head read transposed, sinter's head bias 0
  vit-classifier ViTForImageClassification, 3 channels, logits
  vit-model      ViTModel, 1 channel, pooler_output
  bert           BertModel, token types and a padded row: last_hidden_state (unpadded
                 tokens) and pooler_output
  roberta        RobertaModel: positions from padding id + 1, the same outputs
  (each of the above is also written back by hf_forward --export with hf::save_pretrained and
   loaded by transformers' from_pretrained, which must read every weight from it and give the
   same outputs)
  bert-task      BertForSequenceClassification: refused whole (naming its classifier), then its
                 `bert.` encoder read with --part
  gpt2-deeper    a 3-layer file under a 2-layer config.json: refused naming h.2.*
  distill        (with --distill) a ViTForImageClassification trained briefly on Fashion-MNIST
                 in torch, with its preprocessor_config.json, is the distill recipe's
                 --teacher: the recipe's teacher_accuracy must equal torch's on the 10,000 test
                 images (within 2 images: argmax ties)
Exits 77 (meson's SKIP) when torch or transformers is missing; with SINTER_HF_PYTHON set
(CI sets it to the venv .ci/test makes) the check runs under that interpreter and a missing
package fails instead.
"""
import argparse
import os
import pathlib
import subprocess
import sys

SKIP = 77
TOLERANCE = 1e-4


def reexec_under_hf_python():
    python = os.environ.get("SINTER_HF_PYTHON")
    if python and os.path.realpath(sys.executable) != os.path.realpath(python) \
            and not os.environ.get("SINTER_HF_REEXEC"):
        os.environ["SINTER_HF_REEXEC"] = "1"
        os.execv(python, [python] + sys.argv)


def main():
    reexec_under_hf_python()
    parser = argparse.ArgumentParser()
    parser.add_argument("--forward", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--distill")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    try:
        import torch
        import transformers
        from safetensors.torch import load_file, save_file
    except ImportError as e:
        if os.environ.get("SINTER_HF_PYTHON"):
            print(f"check_hf_weights: {e} under SINTER_HF_PYTHON", file=sys.stderr)
            return 1
        print(f"check_hf_weights: skipped: {e}", file=sys.stderr)
        return SKIP
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    torch.manual_seed(0)
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    def perturbed(model):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        return model.eval()

    def run_forward(name, model, inputs, part=False, expect_error=None, export=True):
        folder = work / name
        model.save_pretrained(folder, safe_serialization=True)
        save_file({k: v.contiguous() for k, v in inputs.items()}, str(folder / "inputs.safetensors"))
        out = folder / "outputs.safetensors"
        if out.exists():
            out.unlink()
        command = [args.forward] + (["--part"] if part else []) + \
            (["--export", str(folder / "exported")] if export and expect_error is None else []) + \
            [str(folder), str(folder / "inputs.safetensors"), str(out)]
        done = subprocess.run(command, capture_output=True, text=True)
        if expect_error is not None:
            if done.returncode == 0 or expect_error not in done.stderr:
                raise AssertionError(f"{name}: expected a refusal naming {expect_error!r}, got "
                                     f"exit {done.returncode}: {done.stderr.strip()}")
            print(f"{name}: refused as expected: {done.stderr.strip()}")
            return None
        if done.returncode != 0:
            raise AssertionError(f"{name}: hf_forward exited {done.returncode}: {done.stderr}")
        return load_file(str(out))

    failures = []

    def exported(name, model_type):
        """What hf_forward --export wrote, loaded back by transformers: every weight must be
        read from the file (none missing, unexpected or of another shape)."""
        model, info = model_type.from_pretrained(work / name / "exported",
                                                 output_loading_info=True)
        problems = {k: v for k, v in info.items() if v}
        if problems:
            failures.append(f"{name} exported: transformers reports {problems}")
        return model.eval()

    def compare(name, ours, reference, keep=None):
        ours = ours.to(torch.float32)
        reference = reference.to(torch.float32)
        if tuple(ours.shape) != tuple(reference.shape):
            failures.append(f"{name}: shape {tuple(ours.shape)} vs {tuple(reference.shape)}")
            return
        difference = (ours - reference).abs()
        if keep is not None:
            difference = difference[keep]
        worst = float(difference.max())
        scale = float(reference.abs().max())
        ok = worst <= TOLERANCE and difference.numel() > 0 and scale > 1e-3
        print(f"{name}: max |sinter - transformers| = {worst:.3g} (outputs up to {scale:.3g}) "
              f"{'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append(f"{name}: max difference {worst} (tolerance {TOLERANCE})")

    T = transformers
    # GPT-2, tied and untied.
    ids = torch.randint(0, 97, (2, 11))
    for name, tied in (("gpt2", True), ("gpt2-untied", False)):
        config = T.GPT2Config(vocab_size=97, n_positions=24, n_embd=32, n_layer=2, n_head=4,
                              tie_word_embeddings=tied)
        model = perturbed(T.GPT2LMHeadModel(config))
        with torch.no_grad():
            reference = model(ids).logits
        out = run_forward(name, model, {"input_ids": ids})
        compare(f"{name} logits", out["logits"], reference)
        with torch.no_grad():
            again = exported(name, T.GPT2LMHeadModel)(ids).logits
        compare(f"{name} exported by sinter, logits in transformers", again, reference)

    # ViT: a classifier on 3-channel images, a pooled backbone on 1-channel ones.
    for name, channels, classifier in (("vit-classifier", 3, True), ("vit-model", 1, False)):
        config = T.ViTConfig(image_size=16, patch_size=4, num_channels=channels, hidden_size=32,
                             num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                             num_labels=5)
        model = perturbed(T.ViTForImageClassification(config) if classifier
                          else T.ViTModel(config))
        pixels = torch.randn(3, channels, 16, 16)
        with torch.no_grad():
            result = model(pixel_values=pixels)
        out = run_forward(name, model, {"pixel_values": pixels})
        kind = T.ViTForImageClassification if classifier else T.ViTModel
        with torch.no_grad():
            again = exported(name, kind)(pixel_values=pixels)
        if classifier:
            compare(f"{name} logits", out["logits"], result.logits)
            compare(f"{name} exported by sinter, logits in transformers", again.logits,
                    result.logits)
        else:
            compare(f"{name} pooler_output", out["pooler_output"], result.pooler_output)
            compare(f"{name} exported by sinter, pooler_output in transformers",
                    again.pooler_output, result.pooler_output)

    # BERT and RoBERTa encoders, with token types and a padded row.
    def text_inputs(vocab, types, pad):
        ids = torch.randint(3, vocab, (2, 9))
        mask = torch.ones(2, 9, dtype=torch.int64)
        mask[1, 6:] = 0
        ids[1, 6:] = pad
        token_types = torch.randint(0, types, (2, 9))
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": token_types}

    encoders = (
        ("bert", T.BertConfig, T.BertModel, 2, 40, 0),
        ("roberta", T.RobertaConfig, T.RobertaModel, 1, 42, 1),
    )
    for name, config_type, model_type, types, positions, pad in encoders:
        config = config_type(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, intermediate_size=37,
                             max_position_embeddings=positions, type_vocab_size=types,
                             pad_token_id=pad)
        model = perturbed(model_type(config))
        inputs = text_inputs(99, types, pad)
        with torch.no_grad():
            result = model(**inputs)
        out = run_forward(name, model, inputs)
        keep = inputs["attention_mask"].bool()
        compare(f"{name} last_hidden_state", out["last_hidden_state"], result.last_hidden_state,
                keep)
        compare(f"{name} pooler_output", out["pooler_output"], result.pooler_output)
        with torch.no_grad():
            again = exported(name, model_type)(**inputs)
        compare(f"{name} exported by sinter, last_hidden_state in transformers",
                again.last_hidden_state, result.last_hidden_state, keep)

    # A task model: refused whole (the classifier has no place in sinter's Bert), its encoder
    # read with --part.
    config = T.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=37, max_position_embeddings=40,
                          num_labels=3)
    model = perturbed(T.BertForSequenceClassification(config))
    inputs = text_inputs(99, 2, 0)
    run_forward("bert-task", model, inputs, expect_error="'classifier.")
    with torch.no_grad():
        result = model.bert(**inputs)
    out = run_forward("bert-task", model, inputs, part=True, export=False)
    compare("bert-task last_hidden_state", out["last_hidden_state"], result.last_hidden_state,
            inputs["attention_mask"].bool())
    compare("bert-task pooler_output", out["pooler_output"], result.pooler_output)

    # A model of another depth is refused, naming the tensor it lacks.
    deeper = work / "gpt2-deeper"
    config = T.GPT2Config(vocab_size=97, n_positions=24, n_embd=32, n_layer=3, n_head=4)
    T.GPT2LMHeadModel(config).save_pretrained(deeper, safe_serialization=True)
    (deeper / "config.json").write_text((work / "gpt2" / "config.json").read_text())
    save_file({"input_ids": ids}, str(deeper / "inputs.safetensors"))
    done = subprocess.run([args.forward, str(deeper), str(deeper / "inputs.safetensors"),
                           str(deeper / "outputs.safetensors")], capture_output=True, text=True)
    if done.returncode == 0 or "h.2." not in done.stderr:
        failures.append(f"gpt2-deeper: expected a refusal naming h.2.*, got exit "
                        f"{done.returncode}: {done.stderr.strip()}")
    else:
        print(f"gpt2-deeper: refused as expected: {done.stderr.strip()}")

    if args.distill:
        check_distill_teacher(args, work, T, torch, failures)

    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    return 1 if failures else 0


def read_idx(path):
    import gzip
    import numpy
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return numpy.frombuffer(data, dtype=numpy.uint8, offset=4 + 4 * dims).reshape(shape)


def check_distill_teacher(args, work, T, torch, failures):
    import json
    data = pathlib.Path(args.data)
    train_x = torch.tensor(read_idx(data / "train-images-idx3-ubyte.gz")[:6000], dtype=torch.float32)
    train_y = torch.tensor(read_idx(data / "train-labels-idx1-ubyte.gz")[:6000], dtype=torch.int64)
    test_x = torch.tensor(read_idx(data / "t10k-images-idx3-ubyte.gz"), dtype=torch.float32)
    test_y = torch.tensor(read_idx(data / "t10k-labels-idx1-ubyte.gz"), dtype=torch.int64)
    mean, std = 0.5, 0.5  # ViTImageProcessor's defaults, written to preprocessor_config.json

    def pixels(x):
        return ((x / 255.0 - mean) / std).unsqueeze(1)

    config = T.ViTConfig(image_size=28, patch_size=7, num_channels=1, hidden_size=32,
                         num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                         num_labels=10)
    model = T.ViTForImageClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(200):
        rows = torch.randint(0, train_x.shape[0], (64,))
        loss = model(pixel_values=pixels(train_x[rows]), labels=train_y[rows]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        predicted = torch.cat([model(pixel_values=pixels(test_x[i:i + 1000])).logits.argmax(-1)
                               for i in range(0, test_x.shape[0], 1000)])
    reference = float((predicted == test_y).float().mean())
    folder = work / "fashion-teacher"
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "do_normalize": True, "do_rescale": True, "rescale_factor": 1 / 255,
        "image_mean": [mean], "image_std": [std], "image_processor_type": "ViTImageProcessor"}))
    done = subprocess.run([args.distill, "--teacher", str(folder), "--steps", "3",
                           "--batch-size", "64", "--no-baseline", "--data-dir", str(data)],
                          capture_output=True, text=True)
    result = [line for line in done.stdout.splitlines() if line.startswith("result: ")]
    if done.returncode != 0 or not result:
        failures.append(f"distill --teacher {folder}: exit {done.returncode}: {done.stderr}")
        return
    fields = dict(f.split("=", 1) for f in result[0][len("result: "):].split())
    ours = float(fields["teacher_accuracy"])
    ok = abs(ours - reference) <= 2e-4 and reference > 0.4
    print(f"distill: teacher_accuracy {ours:.4f} in sinter, {reference:.4f} in torch "
          f"{'ok' if ok else 'FAIL'}")
    if not ok:
        failures.append(f"distill teacher accuracy {ours} vs torch {reference}")


if __name__ == "__main__":
    sys.exit(main())
