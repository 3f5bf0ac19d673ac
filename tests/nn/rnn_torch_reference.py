#!/usr/bin/env python3
"""Reference values for tests/nn/test_gru.cpp from PyTorch (f64, CPU).

Every tensor is filled from a closed formula of its element index k (row-major), so the C++
test rebuilds the same inputs without listing them:
  parameter i (named_parameters order): 0.4 * sin(1.3 k + 0.7 i + 0.1)
  input x:                              sin(0.9 k + 0.3)
  h0:                                   0.5 cos(0.8 k + 0.2)
  c0:                                   0.5 sin(0.6 k + 0.9)
The checked scalar is  sum(out * R_out) + sum(h_n * R_h) [+ sum(c_n * R_c)]  with
  R_out: cos(0.37 k + 0.5),  R_h: sin(0.23 k + 1.1),  R_c: cos(0.19 k + 0.4).
Prints C++ initializer lists: the output, then the gradient of every parameter, x, h0 (and c0).
Run: /usr/bin/python3 tests/nn/rnn_torch_reference.py
"""
import math

import torch

torch.set_default_dtype(torch.float64)


def fill(shape, f):
    n = math.prod(shape)
    return torch.tensor([f(k) for k in range(n)]).reshape(shape)


def cxx(name, t):
    vals = ", ".join("%.17g" % v for v in t.detach().reshape(-1).tolist())
    print("    {\"%s\", {%s}}," % (name, vals))


def run(title, module, x_shape, with_c, extra=None):
    print("// " + title)
    with torch.no_grad():
        for i, (_, p) in enumerate(module.named_parameters()):
            p.copy_(fill(p.shape, lambda k, i=i: 0.4 * math.sin(1.3 * k + 0.7 * i + 0.1)))
    D = 2 if module.bidirectional else 1
    L, H = module.num_layers, module.hidden_size
    B = x_shape[0] if module.batch_first else x_shape[1]
    x = fill(x_shape, lambda k: math.sin(0.9 * k + 0.3)).requires_grad_()
    h0 = fill((L * D, B, H), lambda k: 0.5 * math.cos(0.8 * k + 0.2)).requires_grad_()
    if with_c:
        c0 = fill((L * D, B, H), lambda k: 0.5 * math.sin(0.6 * k + 0.9)).requires_grad_()
        out, (hn, cn) = module(x, (h0, c0))
    else:
        out, hn = module(x, h0)
    loss = (out * fill(out.shape, lambda k: math.cos(0.37 * k + 0.5))).sum()
    loss = loss + (hn * fill(hn.shape, lambda k: math.sin(0.23 * k + 1.1))).sum()
    if with_c:
        loss = loss + (cn * fill(cn.shape, lambda k: math.cos(0.19 * k + 0.4))).sum()
    loss.backward()
    cxx("output", out)
    cxx("h_n", hn)
    if with_c:
        cxx("c_n", cn)
    for name, p in module.named_parameters():
        cxx(name, p.grad)
    cxx("x", x.grad)
    cxx("h0", h0.grad)
    if with_c:
        cxx("c0", c0.grad)


run("GRU(3, 2, num_layers=2), time major, T = 3, B = 2",
    torch.nn.GRU(3, 2, num_layers=2), (3, 2, 3), False)
run("GRU(3, 2, num_layers=2, batch_first, bidirectional), B = 2, T = 3",
    torch.nn.GRU(3, 2, num_layers=2, batch_first=True, bidirectional=True), (2, 3, 3), False)
run("LSTM(3, 2, num_layers=2, batch_first, bidirectional), B = 2, T = 3",
    torch.nn.LSTM(3, 2, num_layers=2, batch_first=True, bidirectional=True), (2, 3, 3), True)

# Embedding(5, 3, padding_idx=-2): row 3 is the padding row. The weight is overwritten with the
# parameter formula (i = 0), so the padding row is nonzero in the forward; its gradient is zero.
print("// Embedding(5, 3, padding_idx=-2), indices [[1, 3, 0], [3, 4, 1]]")
emb = torch.nn.Embedding(5, 3, padding_idx=-2)
print("// padding_idx resolved:", emb.padding_idx, "; initial padding row:", emb.weight[3].tolist())
with torch.no_grad():
    emb.weight.copy_(fill((5, 3), lambda k: 0.4 * math.sin(1.3 * k + 0.1)))
idx = torch.tensor([[1, 3, 0], [3, 4, 1]])
y = emb(idx)
(y * fill(y.shape, lambda k: math.cos(0.37 * k + 0.5))).sum().backward()
cxx("weight", emb.weight.grad)
