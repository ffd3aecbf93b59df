"""A training step's gradient: a 784-256-10 tanh MLP with a softmax cross-entropy loss.

Inputs: ``w1`` (784, 256), ``b1`` (256), ``w2`` (256, 10), ``b2`` (10) with weights normal of
deviation 1/sqrt(fan-in) and zero biases, a batch of ``images`` (B, 784) uniform on [0, 1] and
one-hot ``labels`` (B, 10). The value is the mean cross-entropy; the gradient is with respect to
the four parameters. The size is the batch size B.
"""

import numpy as np

from . import Problem

SIZES = (784, 256, 10)


def objective(T, w1, b1, w2, b2, images, labels):
    logits = T.matmul(T.tanh(T.matmul(images, w1) + b1), w2) + b2
    logp = logits - T.logsumexp(logits, 1)[:, None]
    return -T.sum(labels * logp) / images.shape[0]


def numpy(inp):
    w1, b1, w2, b2, x, y = (inp[k] for k in ("w1", "b1", "w2", "b2", "images", "labels"))
    h = np.tanh(x @ w1 + b1)
    z = h @ w2 + b2
    zm = z - z.max(1, keepdims=True)
    logp = zm - np.log(np.exp(zm).sum(1, keepdims=True))
    value = -np.sum(y * logp) / len(x)
    dz = (np.exp(logp) * y.sum(1, keepdims=True) - y) / len(x)
    da = (dz @ w2.T) * (1 - h * h)
    return float(value), {"w1": x.T @ da, "b1": da.sum(0), "w2": h.T @ dz, "b2": dz.sum(0)}


def inputs(batch, rng):
    i, h, o = SIZES
    return {
        "w1": rng.standard_normal((i, h)) / np.sqrt(i),
        "b1": np.zeros(h),
        "w2": rng.standard_normal((h, o)) / np.sqrt(h),
        "b2": np.zeros(o),
        "images": rng.uniform(0, 1, (batch, i)),
        "labels": np.eye(o)[rng.integers(0, o, batch)],
    }


PROBLEMS = [
    Problem(
        "mlp",
        "gradient of a 784-256-10 tanh MLP's cross-entropy (one training step)",
        "B, the batch size",
        [128, 1024],
        [128],
        inputs,
        numpy,
        objective,
        wrt=("w1", "b1", "w2", "b2"),
    ),
]
