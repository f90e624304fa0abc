#!/usr/bin/python3
"""The PyTorch twin of examples/train/gpt/gpt.mesh, for bench/torch_gpt.sh.

  torch_gpt.py prepare DIR STEPS   write DIR/*.npy (the initial parameters,
                                   drawn here with the example's
                                   initialisers, and one batch of its data)
                                   and DIR/gpt1.mesh, DIR/gpt.mesh: the
                                   example with every `normal(...)` param
                                   loaded from those files, on one device
                                   and on its own mesh
  torch_gpt.py train DIR STEPS THREADS [DEVICE]
                                   train the twin from the same files with
                                   torch.set_num_threads(THREADS), on DEVICE
                                   (default cpu; cuda for bench/gpu.sh);
                                   print one JSON line per step (step, loss,
                                   seconds: loss.item() waits for the device,
                                   so a step's time includes its kernels)

The twin is the same model step for step: embedding + positions, two
pre-norm blocks (4-head causal attention scaled by 0.35355339 with the
additive -1e9 mask, a 4x GELU MLP, exact erf GELU), each checkpointed
(torch.utils.checkpoint: activations recomputed in the backward), a final
layernorm, the output layer, mean cross-entropy; AdamW (lr 0.01, betas 0.9,
0.999, eps 1e-8, weight decay 0.01) under the cosine schedule of spec.md
(linear warm-up over 5 steps, then cosine to min_lr 0.001 at the last step).

Data: the example draws batch = 16 of its 64 windows per step in a shuffled
order. Here the dataset is its first 16 windows, so every step sees all of
them (meshrun in its own shuffled row order); the mean loss and its
gradient do not depend on the order of the rows, so both sides compute the
same numbers and the first steps' losses can be compared.
"""
import json
import math
import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "train", "gpt")
ROWS = 16


def prepare(out, steps):
    src = open(os.path.join(EXAMPLE, "gpt.mesh")).read()
    rng = np.random.default_rng(0)
    param = re.compile(r"^param (\w+)\s*: f32\[([\d, ]+)\]\s*(\{[^}]*\})\s*= normal\(0, ([\d.]+)\)", re.M)

    def load(m):
        name, shape, std = m.group(1), [int(d) for d in m.group(2).split(",")], float(m.group(4))
        np.save(os.path.join(out, name + ".npy"), (rng.standard_normal(shape) * std).astype(np.float32))
        return f'param {name} : f32[{m.group(2)}] {m.group(3)} = load("{name}.npy")'

    src, n = param.subn(load, src)
    assert n == 9, f"{n} normal params in gpt.mesh; the twin knows 9"
    for name in ("tokens", "targets"):
        np.save(os.path.join(out, name + ".npy"), np.load(os.path.join(EXAMPLE, name + ".npy"))[:ROWS])
    src, n = re.subn(r"i64\[64, 16\]", f"i64[{ROWS}, 16]", src)
    assert n == 2, "tok and tgt are i64[64, 16] in gpt.mesh"
    src = re.sub(r"steps = \d+", f"steps = {steps}", src)
    assert "batch = 16" in src and "adamw(lr=0.01)" in src and "cosine(warmup=5, min_lr=0.001)" in src
    open(os.path.join(out, "gpt.mesh"), "w").write(src)
    open(os.path.join(out, "gpt1.mesh"), "w").write(src.replace("mesh M = [dp=2, tp=2]", "mesh M = [dp=1, tp=1]"))


def train(out, steps, threads, device="cpu"):
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    torch.set_num_threads(threads)
    ld = lambda n: torch.from_numpy(np.load(os.path.join(out, n + ".npy"))).to(device)
    P = {n: ld(n).requires_grad_() for n in ("wte", "wpe", "Wq", "Wk", "Wv", "Wo", "W1", "W2", "Wout")}
    for n, v in (("g1", 1), ("b1", 0), ("g2", 1), ("b2", 0)):
        P[n] = torch.full((2, 32), float(v), device=device, requires_grad=True)
    P["gf"] = torch.ones(32, device=device, requires_grad=True)
    P["bf"] = torch.zeros(32, device=device, requires_grad=True)
    tok, tgt = ld("tokens"), ld("targets")
    mask = torch.triu(torch.full((16, 16), -1e9, device=device), diagonal=1)

    def heads(t):
        return t.reshape(16, 16, 4, 8).permute(0, 2, 1, 3)

    def merge(t):
        return t.permute(0, 2, 1, 3).reshape(16, 16, 32)

    def block(x, l):
        a = F.layer_norm(x, (32,), P["g1"][l], P["b1"][l], 1e-5)
        q, k, v = (heads(a @ P[w][l]) for w in ("Wq", "Wk", "Wv"))
        s = (q @ k.transpose(-2, -1)) * 0.35355339 + mask
        h = x + merge(torch.softmax(s, dim=-1) @ v) @ P["Wo"][l]
        m = F.layer_norm(h, (32,), P["g2"][l], P["b2"][l], 1e-5)
        return h + F.gelu(m @ P["W1"][l]) @ P["W2"][l]

    def loss_fn():
        x = F.embedding(tok, P["wte"]) + P["wpe"]
        for l in range(2):
            x = checkpoint(block, x, l, use_reentrant=False)
        logits = F.layer_norm(x, (32,), P["gf"], P["bf"], 1e-5) @ P["Wout"]
        return F.cross_entropy(logits.reshape(256, 37), tgt.reshape(256))

    lr, min_lr, warm = 0.01, 0.001, 5
    opt = torch.optim.AdamW(list(P.values()), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    for t in range(1, steps + 1):
        t0 = time.perf_counter()
        for g in opt.param_groups:  # spec.md's cosine(warmup, min_lr)
            g["lr"] = lr * t / warm if t <= warm else min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * (t - warm) / (steps - warm)))
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
        v = loss.item()
        print(json.dumps({"step": t, "loss": v, "seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(sys.argv[2], int(sys.argv[3]))
    else:
        train(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:6])
