#!/usr/bin/env python3
"""Check a `ddptrain export --format hf` against Hugging Face transformers.

Loads the export with transformers' GPT2LMHeadModel.from_pretrained, runs the prompt goddp ran
(goddp_logits.json, written by `ddptrain export --check-logits`) and compares the logits with
goddp's own (computed by goddp on the CPU in f32). Prints PASS or FAIL with the max abs diff and
exits 0 or 1. Not part of CI: it needs torch and transformers (the GPU host has them).

One command, from a checkpoint (runs the export itself, with bin/ddptrain or `go run`):

    python3 scripts/check_hf_export.py --checkpoint runs/opticks-bpe/ck

or on an export made before:

    bin/ddptrain export --checkpoint runs/opticks-bpe/ck --format hf --out /tmp/hf --check-logits
    python3 scripts/check_hf_export.py /tmp/hf

Tolerance: |hf - goddp| <= atol + rtol * max|goddp| everywhere (defaults 1e-3 and 1e-4: f32 on
two implementations whose sums run in different orders; a wrong layout or a missing transpose is
off by whole units).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def export(checkpoint, out):
    exe = os.path.join(REPO, "bin", "ddptrain")
    cmd = [exe] if os.access(exe, os.X_OK) else ["go", "run", "./cmd/ddptrain"]
    cmd += ["export", "--checkpoint", checkpoint, "--format", "hf", "--out", out, "--check-logits"]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="an export directory with goddp_logits.json")
    ap.add_argument("--checkpoint", help="export this checkpoint (or checkpoint.dir) first, into a temporary directory")
    ap.add_argument("--atol", type=float, default=1e-3)
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args()
    if bool(args.out) == bool(args.checkpoint):
        ap.error("give an export directory or --checkpoint DIR")

    tmp = None
    out = args.out
    if args.checkpoint:
        tmp = tempfile.mkdtemp(prefix="goddp-hf-")
        out = tmp
        export(os.path.abspath(args.checkpoint), out)
    try:
        ok = check(out, args.atol, args.rtol)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


def check(out, atol, rtol):
    import torch
    from transformers import GPT2LMHeadModel

    ref_path = os.path.join(out, "goddp_logits.json")
    if not os.path.exists(ref_path):
        print(f"FAIL: {ref_path} missing (export with --check-logits)")
        return False
    ref = json.load(open(ref_path))
    model, info = GPT2LMHeadModel.from_pretrained(out, torch_dtype=torch.float32, output_loading_info=True)
    model.eval()
    # A tied lm_head and the attention-mask buffers are not in the file by design.
    benign = lambda k: k == "lm_head.weight" or k.endswith(".attn.bias") or k.endswith(".attn.masked_bias")
    missing = [k for k in info.get("missing_keys", []) if not benign(k)]
    unexpected = [k for k in info.get("unexpected_keys", []) if not benign(k)]
    if missing or unexpected or info.get("mismatched_keys"):
        print(f"FAIL: from_pretrained: missing {missing}, unexpected {unexpected}, mismatched {info.get('mismatched_keys')}")
        return False
    if model.config.tie_word_embeddings and model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        print("FAIL: lm_head is not tied to wte")
        return False

    tokens = torch.tensor([ref["tokens"]], dtype=torch.long)
    with torch.no_grad():
        hf = model(tokens).logits[0].double()  # (T, V)
    goddp = torch.tensor(ref["logits"], dtype=torch.float64)  # (T, V)
    if hf.shape != goddp.shape:
        print(f"FAIL: logits shape {tuple(hf.shape)} from transformers, {tuple(goddp.shape)} from goddp")
        return False
    diff = (hf - goddp).abs()
    max_diff = diff.max().item()
    scale = goddp.abs().max().item()
    bound = atol + rtol * scale
    agree = (hf.argmax(-1) == goddp.argmax(-1)).float().mean().item()
    c = model.config
    print(f"checkpoint {ref.get('checkpoint')} step {ref.get('step')}: gpt2 n_layer {c.n_layer} n_embd {c.n_embd} "
          f"n_head {c.n_head} n_positions {c.n_positions} vocab_size {c.vocab_size} ({c.activation_function})")
    print(f"prompt {ref['prompt']!r}: {tokens.shape[1]} tokens; logits max |goddp| {scale:.4g}, "
          f"argmax agreement {100 * agree:.1f}%")
    verdict = "PASS" if max_diff <= bound else "FAIL"
    print(f"{verdict}: max abs diff {max_diff:.3e} (bound {bound:.3e} = atol {atol:g} + rtol {rtol:g} * {scale:.4g})")
    return verdict == "PASS"


if __name__ == "__main__":
    main()
