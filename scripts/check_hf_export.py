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

Where transformers is not installed, --reference torch runs GPT-2's forward written out here in
plain torch from transformers' modeling_gpt2 (Conv1D x@W+b, gelu_new, pre-LN blocks, tied head)
over the export's tensors by their Hugging Face names, read with a safetensors parser of its own:
an independent check of the layout, though not of from_pretrained itself. (Needs only torch.)
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


def need_torch():
    """Exits 2 with one line naming the interpreter when torch is not importable."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"check_hf_export.py: torch is not importable by {sys.executable} ({e}): install torch and "
              f"transformers for it (pip install torch transformers), or run this script with a python that "
              f"has them", file=sys.stderr)
        sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="an export directory with goddp_logits.json (with --checkpoint: where to export it)")
    ap.add_argument("--checkpoint", help="export this checkpoint (or checkpoint.dir) first, into out or a temporary directory")
    ap.add_argument("--atol", type=float, default=1e-3)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--reference", choices=["transformers", "torch"], default="transformers",
                    help="transformers: GPT2LMHeadModel.from_pretrained (the check); torch: the forward written out here")
    args = ap.parse_args()
    if not args.out and not args.checkpoint:
        ap.error("give an export directory (with goddp_logits.json), or --checkpoint DIR (and, optionally, "
                 "a directory to keep its export in)")
    need_torch()

    tmp = None
    out = args.out
    if args.checkpoint:
        if not out:  # --checkpoint alone: export into a temporary directory
            tmp = tempfile.mkdtemp(prefix="goddp-hf-")
            out = tmp
        export(os.path.abspath(args.checkpoint), os.path.abspath(out))
    try:
        ok = check(out, args.atol, args.rtol, args.reference)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


def read_safetensors(path):
    """name -> float32 torch tensor, from the file format's spec (header length, JSON, data)."""
    import struct
    import numpy as np
    import torch
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    header.pop("__metadata__", None)
    data = b[8 + n:]
    out = {}
    for name, e in header.items():
        s, t = e["data_offsets"]
        raw = data[s:t]
        if e["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: dtype {e['dtype']}")
        out[name] = torch.from_numpy(a.copy()).reshape(e["shape"])
    return out


def torch_gpt2_logits(out, tokens):
    """GPT2LMHeadModel's forward (transformers' modeling_gpt2, eval mode) in plain torch."""
    import math
    import torch
    cfg = json.load(open(os.path.join(out, "config.json")))
    w = read_safetensors(os.path.join(out, "model.safetensors"))
    g = lambda n: w["transformer." + n]
    C, H, L, eps = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["layer_norm_epsilon"]
    assert cfg["activation_function"] in ("gelu_new", "gelu_pytorch_tanh"), cfg["activation_function"]

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (C,), g(p + ".weight"), g(p + ".bias"), eps)

    def conv1d(x, p):  # transformers' Conv1D: weight (in, out), y = x @ W + b
        return x @ g(p + ".weight") + g(p + ".bias")

    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    T = tokens.shape[1]
    x = g("wte.weight")[tokens] + g("wpe.weight")[torch.arange(T)]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = f"h.{l}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(C, dim=2)
        heads = lambda t: t.view(1, T, H, C // H).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
        att = att.masked_fill(~mask, torch.finfo(att.dtype).min).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(1, T, C)
        x = x + conv1d(y, p + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    x = ln(x, "ln_f")
    head = g("wte.weight") if cfg.get("tie_word_embeddings", True) else w["lm_head.weight"]
    return x @ head.T, cfg


def check(out, atol, rtol, reference="transformers"):
    import torch

    ref_path = os.path.join(out, "goddp_logits.json")
    if not os.path.exists(ref_path):
        print(f"FAIL: {ref_path} missing (export with --check-logits)")
        return False
    ref = json.load(open(ref_path))
    tokens = torch.tensor([ref["tokens"]], dtype=torch.long)
    if reference == "torch":
        with torch.no_grad():
            logits, cfg = torch_gpt2_logits(out, tokens)
        print("reference: GPT-2's forward written out in torch (not transformers' from_pretrained)")
        return compare(ref, logits[0].double(), cfg, atol, rtol)

    try:
        from transformers import GPT2LMHeadModel
    except ImportError as e:
        print(f"FAIL: transformers is not importable here ({e}); --reference torch checks the layout without it")
        return False
    # No dtype argument (torch_dtype before transformers 4.56, dtype after): the export is F32 and
    # says so in config.json; .float() makes sure.
    model, info = GPT2LMHeadModel.from_pretrained(out, output_loading_info=True)
    model = model.float().eval()
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

    with torch.no_grad():
        hf = model(tokens).logits[0].double()  # (T, V)
    print(f"reference: transformers GPT2LMHeadModel.from_pretrained({out!r})")
    return compare(ref, hf, model.config.to_dict(), atol, rtol)


def compare(ref, hf, c, atol, rtol):
    import torch
    goddp = torch.tensor(ref["logits"], dtype=torch.float64)  # (T, V)
    if hf.shape != goddp.shape:
        print(f"FAIL: logits shape {tuple(hf.shape)} from the reference, {tuple(goddp.shape)} from goddp")
        return False
    diff = (hf - goddp).abs()
    max_diff = diff.max().item()
    scale = goddp.abs().max().item()
    bound = atol + rtol * scale
    agree = (hf.argmax(-1) == goddp.argmax(-1)).double().mean().item()
    print(f"checkpoint {ref.get('checkpoint')} step {ref.get('step')}: gpt2 n_layer {c['n_layer']} n_embd {c['n_embd']} "
          f"n_head {c['n_head']} n_positions {c['n_positions']} vocab_size {c['vocab_size']} ({c['activation_function']})")
    print(f"prompt {ref['prompt']!r}: {len(ref['tokens'])} tokens; logits max |goddp| {scale:.4g}, "
          f"argmax agreement {100 * agree:.1f}%")
    verdict = "PASS" if max_diff <= bound else "FAIL"
    print(f"{verdict}: max abs diff {max_diff:.3e} (bound {bound:.3e} = atol {atol:g} + rtol {rtol:g} * {scale:.4g})")
    return verdict == "PASS"


if __name__ == "__main__":
    main()
