#!/usr/bin/env python3
# tests/bench/autocast_dtypes.py — which dtype PyTorch's autocast gives each op a transformer
# step uses, measured on this machine's torch (docs/amp.md, "Op by op, beside PyTorch's
# autocast")
"""Usage: autocast_dtypes.py [--device cpu|cuda] [--dtype bf16|fp16]

Run it with a Python that has torch (build-ci/hf-venv/bin/python, which .ci/test makes, has
Debian's torch 1.13). Runs each op inside torch.autocast on f32 inputs, or on the low-precision
output of a matmul where that is what the op reads in a transformer, and prints one line per op:
`<op>: <result dtype>`. CPU autocast in torch 1.13 supports bf16 only.
"""
import argparse

import torch
import torch.nn.functional as F


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    args = parser.parse_args()
    low = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    device = torch.device(args.device)
    torch.manual_seed(0)
    x = torch.randn(4, 8, device=device)
    w = torch.randn(8, 8, device=device)
    b = torch.randn(8, device=device)
    labels = torch.tensor([1, 2, 3, 4], device=device)
    print(f"torch {torch.__version__}, autocast on {device.type} to {low}")
    with torch.autocast(device.type, dtype=low):
        h = x @ w  # what a linear layer hands the next op
        ops = {
            "matmul (f32 operands)": lambda: x @ w,
            "linear / addmm (f32 weight and bias)": lambda: F.linear(x, w, b),
            "bmm (attention scores)": lambda: torch.bmm(x[None], w[None]),
            "softmax (low input)": lambda: torch.softmax(h, -1),
            "log_softmax (low input)": lambda: torch.log_softmax(h, -1),
            "layer_norm (low input)": lambda: F.layer_norm(h, (8,)),
            "cross_entropy (low logits)": lambda: F.cross_entropy(h, labels),
            "gelu (low input)": lambda: F.gelu(h),
            "tanh (low input)": lambda: torch.tanh(h),
            "exp (low input)": lambda: torch.exp(h),
            "f32 + low (a residual add)": lambda: x + h,
            "low * f32 parameter": lambda: h * b,
            "low + low": lambda: h + h,
            "sum (low input)": lambda: h.sum(),
            "mean (low input)": lambda: h.mean(),
            "logsumexp (low input)": lambda: torch.logsumexp(h, -1),
        }
        for name, op in ops.items():
            print(f"{name}: {str(op().dtype).replace('torch.', '')}")


if __name__ == "__main__":
    main()
