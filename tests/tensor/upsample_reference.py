# Prints the PyTorch reference values in tests/tensor/test_upsample.cpp (run with a Python that
# has torch; the test itself does not need it; `... sweep` checks the index rules instead, below).
# Inputs are exact in every dtype:
#   x[i] = ((i * 37) % 23 - 11) / 8,  dy[i] = ((i * 11) % 7 - 3) / 4   (i: row-major position)
# Each case prints the output and the input's gradient for dy, in f64, as C++ initializer lists.
import torch
import torch.nn.functional as F

from torch_reference_inputs import dys, show, xs


def run(name, shape, **kw):
    x = xs(shape).requires_grad_()
    y = F.interpolate(x, **kw)
    y.backward(dys(y.shape))
    show(name + " out", y.detach())
    show(name + " grad", x.grad)


def references():
    run("nearest [1,2,5,3] -> (7,8)", [1, 2, 5, 3], size=(7, 8), mode="nearest")
    run("nearest [1,2,7,6] -> (5,4)", [1, 2, 7, 6], size=(5, 4), mode="nearest")
    run("nearest [1,1,3,4] x (2.5,1.5)", [1, 1, 3, 4], scale_factor=(2.5, 1.5), mode="nearest")
    run("bilinear [1,2,5,7] -> (7,5)", [1, 2, 5, 7], size=(7, 5), mode="bilinear", align_corners=False)
    run("bilinear [1,1,4,5] x 1.5", [1, 1, 4, 5], scale_factor=1.5, mode="bilinear", align_corners=False)
    run("bilinear [1,1,5,6] x 0.7", [1, 1, 5, 6], scale_factor=0.7, mode="bilinear", align_corners=False)
    run("bilinear [1,1,5,6] x 0.7 recomputed", [1, 1, 5, 6], scale_factor=0.7, mode="bilinear", align_corners=False,
        recompute_scale_factor=True)
    run("bilinear align_corners [1,2,3,4] -> (8,3)", [1, 2, 3, 4], size=(8, 3), mode="bilinear", align_corners=True)
    run("bilinear align_corners [1,1,7,6] -> (5,1)", [1, 1, 7, 6], size=(5, 1), mode="bilinear", align_corners=True)


# `python3 upsample_reference.py sweep` checks the index rules of Note [Upsample index math]
# (tensor/core/upsample_formulas.h), written out again below, against torch over input sizes 1-11,
# output sizes 1-24 and scale factors 0.3-3.3, in f32 and f64: the outputs and the gradients (the
# rules' weights transposed), to rounding.
def sweep():
    import math
    import sys

    import numpy as np

    f32 = np.float32

    def taps(o, n, out, sf, linear, ac, C):
        if out == n:
            return o, o, C(0)
        if not linear:
            if out == 2 * n:
                return o // 2, o // 2, C(0)
            s = f32(1.0 / sf) if sf else f32(n) / f32(out)
            i = min(int(f32(f32(o) * s)), n - 1)
            return i, i, C(0)
        if ac:
            s = C(n - 1) / C(out - 1) if out > 1 else C(0)
            src = C(s * C(o))
        else:
            s = C(1.0 / sf) if sf else C(n) / C(out)
            src = max(C(float(s) * (o + 0.5) - 0.5), C(0))
        i0 = int(src)
        return i0, min(i0 + 1, n - 1), C(src - C(i0))

    def matrix(n, out, sf, linear, ac, C):  # [out, n]: output o = sum_i m[o, i] x[i]
        m = np.zeros((out, n))
        for o in range(out):
            i0, i1, w1 = taps(o, n, out, sf, linear, ac, C)
            m[o, i0] += 1 - float(w1)
            m[o, i1] += float(w1)
        return m

    bad = total = 0
    factors = [0.3, 0.45, 0.5, 0.7, 0.9, 1.0, 1.1, 1.3, 1.5, 1.9, 2.0, 2.1, 2.5, 2.9, 3.0, 3.3]
    for dt, C, tol in [(torch.float64, np.float64, 1e-12), (torch.float32, f32, 1e-5)]:
        for n in range(1, 12):
            x = torch.randn(1, 1, 1, n, dtype=dt, requires_grad=True)
            for mode, ac in [("nearest", None), ("bilinear", False), ("bilinear", True)]:
                confs = [(o, None) for o in range(1, 25)] + [(None, f) for f in factors if math.floor(n * f) >= 1]
                for size, sf in confs:
                    kw = dict(size=(1, size)) if size else dict(scale_factor=(1.0, sf))
                    y = F.interpolate(x, mode=mode, align_corners=ac, **kw)
                    out = y.shape[-1]
                    m = matrix(n, out, sf, mode == "bilinear", ac, C)
                    dy = torch.randn(y.shape, dtype=dt)
                    (g,) = torch.autograd.grad(y, x, dy)
                    err = np.abs(m @ x.detach().numpy().ravel() - y.detach().numpy().ravel()).max()
                    gerr = np.abs(m.T @ dy.numpy().ravel() - g.numpy().ravel()).max()
                    total += 1
                    if err > tol * 4 or gerr > tol * 4 * out:
                        bad += 1
                        print("differs:", dt, n, size, sf, mode, ac, err, gerr)
    print(f"sweep: {bad} of {total} cases differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["sweep"]:
        sweep()
    else:
        references()
