# The inputs the tests' PyTorch reference scripts share with tests/support/torch_reference.h,
# exact in every dtype:
#   x[i] = ((i * 37) % 23 - 11) / 8,  dy[i] = ((i * 11) % 7 - 3) / 4   (i: row-major position)
# and the printing of a result as a C++ initializer list.
import torch

torch.set_default_dtype(torch.float64)


def xs(shape):
    n = 1
    for s in shape:
        n *= s
    return torch.tensor([((i * 37) % 23 - 11) / 8 for i in range(n)]).reshape(shape)


def dys(shape):
    n = 1
    for s in shape:
        n *= s
    return torch.tensor([((i * 11) % 7 - 3) / 4 for i in range(n)]).reshape(shape)


def show(name, t):
    vals = ", ".join(repr(float(v)) for v in t.flatten())
    print(f"// {name} {list(t.shape)}\n{{{vals}}},")
