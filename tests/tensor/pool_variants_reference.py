# Prints the PyTorch reference values in tests/tensor/test_pool_variants.cpp (run with a Python
# that has torch; the test itself does not need it). Inputs are exact in every dtype:
#   x[i] = ((i * 37) % 23 - 11) / 8,  dy[i] = ((i * 11) % 7 - 3) / 4   (i: row-major position)
import sys
import torch
import torch.nn.functional as F

from torch_reference_inputs import dys, show, xs


def run(name, f, shapes):
    leaves = [xs(s).requires_grad_() for s in shapes]
    y = f(*leaves)
    y.backward(dys(y.shape))
    show(name + " out", y.detach())
    for i, l in enumerate(leaves):
        show(f"{name} grad {i}", l.grad)


what = sys.argv[1] if len(sys.argv) > 1 else "all"
if what in ("adaptive", "all"):
    run("adaptive [1,2,5,7] -> (3,4)", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), [[1, 2, 5, 7]])
    run("adaptive [2,1,4,3] -> (6,5)", lambda x: F.adaptive_avg_pool2d(x, (6, 5)), [[2, 1, 4, 3]])
    run("adaptive [1,2,3,5] -> (None,2)", lambda x: F.adaptive_avg_pool2d(x, (None, 2)), [[1, 2, 3, 5]])
if what in ("groups", "all"):
    run("groups 2", lambda x, w, b: F.conv2d(x, w, b, 1, 1, 1, 2), [[2, 4, 5, 5], [6, 2, 3, 3], [6]])
    run("depthwise", lambda x, w: F.conv2d(x, w, None, 2, 1, (1, 2), 3), [[1, 3, 6, 7], [6, 1, 3, 3]])
if what in ("pool", "all"):
    run("max ceil dil", lambda x: F.max_pool2d(x, 3, 2, 1, 2, ceil_mode=True), [[1, 2, 6, 7]])
    run("max ceil rect", lambda x: F.max_pool2d(x, (2, 3), 2, 1, 1, ceil_mode=True), [[1, 1, 5, 6]])
    run("avg ceil incl", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True), [[1, 2, 6, 7]])
    run("avg ceil excl", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), [[1, 2, 6, 7]])
    run("avg excl rect", lambda x: F.avg_pool2d(x, (3, 2), (2, 3), (1, 1), count_include_pad=False), [[1, 1, 5, 7]])
if what in ("same", "all"):
    run("same even", lambda x, w, b: F.conv2d(x, w, b, padding="same"), [[1, 2, 6, 5], [3, 2, 4, 3], [3]])
    run("same dilated", lambda x, w: F.conv2d(x, w, None, padding="same", dilation=(1, 3)), [[1, 2, 5, 8], [2, 2, 4, 2]])
