#!/usr/bin/env python3
"""The yardstick for bench/cpu_train_step: the same three models in PyTorch on the CPU.

The models, batch sizes, optimizers and steps are those of bench/cpu_train_step.cpp (which builds
mixtape's examples' models); both time whole training steps (forward, backward, optimizer step)
on fixed synthetic batches after warm-up steps, with the same thread count, and print one JSON
object per (model, precision):

    {"impl": "pytorch", "model": "cnn", "precision": "bf16", "threads": 2, "batch": 64,
     "steps": 40, "ms_per_step": 25.1, "steps_per_s": 39.8}

Precisions: fp32, and bf16 through CPU autocast (torch.autocast("cpu", torch.bfloat16): the
nearest thing PyTorch has to mixed bf16 on a CPU; parameters stay fp32). PyTorch has no fp16
autocast on the CPU, so there is no fp16 row.

    python3 bench/torch_cpu_reference.py --models cnn --precisions fp32,bf16 --threads 2 --steps 40
"""
import argparse
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- the models (examples/cnn_train.h, examples/char_lstm.cpp, examples/dcgan.cpp) ----------

def make_cnn(width=32, dropout=0.3):
    w1, w2 = width, 2 * width
    return nn.Sequential(
        nn.Conv2d(1, w1, 3, 1, 1), nn.BatchNorm2d(w1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(w1, w2, 3, 1, 1), nn.BatchNorm2d(w2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(w2 * 7 * 7, 128), nn.ReLU(), nn.Dropout(dropout), nn.Linear(128, 10))


class CharLSTM(nn.Module):
    def __init__(self, vocab, embed=64, hidden=256, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids):
        out, _ = self.lstm(self.embed(ids))
        return self.head(out)


def make_generator(nz=100, ngf=32, nc=1, stages=3):
    ch = ngf << (stages - 1)
    layers = [nn.ConvTranspose2d(nz, ch, 4, 1, 0, bias=False), nn.BatchNorm2d(ch), nn.ReLU()]
    for _ in range(1, stages):
        layers += [nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ch // 2), nn.ReLU()]
        ch //= 2
    layers += [nn.ConvTranspose2d(ch, nc, 4, 2, 1, bias=False), nn.Tanh()]
    return nn.Sequential(*layers)


def make_discriminator(ndf=32, nc=1, stages=3):
    layers = [nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2)]
    ch = ndf
    for _ in range(1, stages):
        layers += [nn.Conv2d(ch, ch * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ch * 2), nn.LeakyReLU(0.2)]
        ch *= 2
    layers += [nn.Conv2d(ch, 1, 4, 1, 0, bias=False), nn.Flatten()]
    return nn.Sequential(*layers)


# ---- one training step per model -----------------------------------------------------------

def cnn_step_fn(batch, autocast):
    torch.manual_seed(0)
    model = make_cnn()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    x = torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
    return step


def char_lstm_step_fn(batch, autocast, vocab=96, seq_len=100):
    torch.manual_seed(0)
    model = CharLSTM(vocab)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    ids = torch.randint(0, vocab, (batch, seq_len))
    targets = torch.randint(0, vocab, (batch, seq_len))

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            logits = model(ids)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return step


def dcgan_step_fn(batch, autocast, nz=100):
    torch.manual_seed(0)
    G, D = make_generator(nz), make_discriminator()
    g_opt = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
    d_opt = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real = torch.rand(batch, 1, 32, 32) * 2 - 1
    ones, zeros = torch.ones(batch, 1), torch.zeros(batch, 1)

    def step():
        z = torch.randn(batch, nz, 1, 1)
        with autocast():
            fake = G(z)
        # D: BCE(D(x), 1) + BCE(D(G(z)), 0), G(z) detached
        d_opt.zero_grad(set_to_none=True)
        with autocast():
            out_real, out_fake = D(real), D(fake.detach())
        err_d = (F.binary_cross_entropy_with_logits(out_real.float(), ones) +
                 F.binary_cross_entropy_with_logits(out_fake.float(), zeros))
        err_d.backward()
        d_opt.step()
        # G: BCE(D(G(z)), 1) through the updated D
        g_opt.zero_grad(set_to_none=True)
        with autocast():
            out = D(fake)
        err_g = F.binary_cross_entropy_with_logits(out.float(), ones)
        err_g.backward()
        g_opt.step()
    return step


MODELS = {"cnn": cnn_step_fn, "char_lstm": char_lstm_step_fn, "dcgan": dcgan_step_fn}


def autocast_for(precision):
    if precision == "fp32":
        return lambda: torch.autocast("cpu", enabled=False)
    if precision == "bf16":
        return lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    raise ValueError(f"precision {precision!r}: PyTorch's CPU autocast does fp32 and bf16 only")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="cnn,char_lstm,dcgan")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for m in a.models.split(","):
        if m not in MODELS:
            sys.exit(f"torch_cpu_reference: unknown model {m!r} (cnn, char_lstm, dcgan)")
        for p in a.precisions.split(","):
            if p == "fp16":
                continue  # no CPU autocast for fp16
            step = MODELS[m](a.batch, autocast_for(p))
            for _ in range(a.warmup):
                step()
            t0 = time.perf_counter()
            for _ in range(a.steps):
                step()
            dt = time.perf_counter() - t0
            print(json.dumps({"impl": "pytorch", "model": m, "precision": p, "threads": a.threads, "batch": a.batch,
                              "steps": a.steps, "ms_per_step": round(1000 * dt / a.steps, 3),
                              "steps_per_s": round(a.steps / dt, 3)}), flush=True)


if __name__ == "__main__":
    main()
