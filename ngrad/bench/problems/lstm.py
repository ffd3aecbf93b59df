"""ADBench's and GradBench's ``lstm``: a diagonal LSTM language model's mean cross-entropy.

Inputs, with l layers, hidden size b and a sequence of c steps: ``main_params`` (2l, 4b) holds,
for layer i, gate weights in row 2i and biases in row 2i+1 (forget, input, output, change);
``extra_params`` (3, b) the input scale, output scale and output bias; ``state`` (2l, b) the
initial hidden (row 2i) and cell (row 2i+1) of each layer; ``sequence`` (c, b). The gates are
diagonal: forget and output read the layer's input, input and change read its hidden state.
Each step predicts the next sequence entry y; the loss is -sum(y_next * (y - lse(y))) / ((c-1) b)
with ADBench's lse(y) = log(sum(exp(y)) + 2) (the ``+ 2`` is in ADBench's and GradBench's C++
``logsumexp``; it makes ``y - lse(y)`` not quite a log-softmax).
The gradient is with respect to ``main_params`` and ``extra_params``. The size is c (l = 2,
b = 14 as in ADBench's standard files); all inputs are uniform on [-1, 1].
"""

import numpy as np

from . import Problem, scan

LAYERS, HIDDEN = 2, 14
# characters per step of the scan's loop (the rest, fewer, one per step): a step's own cost (the
# body's dispatch, an allocation per stored value) is shared by 16 (jacobian at l = 2, c = 1,024:
# 63 -> 9.6 ms of CPU; l = 6: 109 -> 17 ms; 32 gained little more and made first calls longer)
UNROLL = 16


def lse(T, y):
    """ADBench's log-sum-exp of a prediction: log(sum(exp(y)) + 2), without a max shift (as the
    reference computes it)."""
    return T.log(T.sum(T.exp(y)) + 2)


def weights(main_params, extra_params):
    """The slices each step reads, taken once: per layer its four gates' (weights, biases)
    (forget, input, output, change), then the input scale, output scale and output bias.
    Taken inside the step, they were work that reads no carry, which ``ngrad.scan`` hoists out
    of its body as operands of its own, one set per unrolled character (a program of 3,224
    instructions whose kernels Numba took minutes to compile)."""
    b = main_params.shape[1] // 4
    layers = [
        [(main_params[2 * i, k * b : (k + 1) * b], main_params[2 * i + 1, k * b : (k + 1) * b]) for k in range(4)]
        for i in range(main_params.shape[0] // 2)
    ]
    return layers, (extra_params[0], extra_params[1], extra_params[2])


def cell_step(T, gates, x, hidden, cell):
    """One layer, one step: the new (hidden, cell). Each gate has its own weights (``gates``):
    gathering the inputs into one vector first, ``cat([x, hidden, x])``, put a copy each way in
    every step of the scan (objective 27 -> 20 ms, jacobian 74 -> 60 ms of CPU at two layers,
    c = 1,024)."""
    (wf, bf), (wi, bi), (wo, bo), (wc, bc) = gates
    forget = T.sigmoid(x * wf + bf)
    ingate = T.sigmoid(hidden * wi + bi)
    outgate = T.sigmoid(x * wo + bo)
    change = T.tanh(hidden * wc + bc)
    cell = cell * forget + ingate * change
    return outgate * T.tanh(cell), cell


def predict(T, params, carry, x):
    """One step over the layers from the sequence entry ``x`` (``params``: ``weights``'s): the
    new carry (each layer's hidden and cell states, two tuples) and the prediction y."""
    layers, (scale, out_scale, out_bias) = params
    hidden, cell = list(carry[0]), list(carry[1])
    x = x * scale
    for i, gates in enumerate(layers):
        hidden[i], cell[i] = cell_step(T, gates, x, hidden[i], cell[i])
        x = hidden[i]
    return (tuple(hidden), tuple(cell)), x * out_scale + out_bias


def objective(T, main_params, extra_params, state, sequence):
    """A scan over the characters (``ngrad.scan``, ``UNROLL`` of them a step), the layers inside
    its body: the program holds the same bodies whatever the sequence length. The loss's sum
    and its count, (c - 1) b, are carried from step to step (the sum in the reference's order),
    so that no number in the program depends on c: a count taken from the shape is a constant
    of a kernel, and each sequence length compiled its own."""
    layers = main_params.shape[0] // 2
    params = weights(main_params, extra_params)
    width = T.sum(T.ones_like(state[0]))  # b, outside the step for the reason ``weights`` gives

    def step(carry, pair):
        hidden_cell, total, count = carry
        hidden_cell, y = predict(T, params, hidden_cell, pair[0])
        total = total + T.sum(pair[1] * (y - lse(T, y)))
        return (hidden_cell, total, count + width), ()

    hidden_cell = (tuple(state[2 * i] for i in range(layers)), tuple(state[2 * i + 1] for i in range(layers)))
    zero = T.zeros((), dtype=state.dtype)
    init = (hidden_cell, zero, zero)
    (_, total, count), _ = scan(T, step, init, (sequence[:-1], sequence[1:]), unroll=UNROLL)
    return -total / count


def jax_system(jax, J):
    """JAX as its users write a recurrence: ``lax.scan`` over the steps, not an unrolled loop
    (which XLA takes minutes to compile at these lengths)."""

    def loss(params, state, sequence):
        main_params, extra_params = params
        b = main_params.shape[1] // 4

        params = weights(main_params, extra_params)

        def step(carry, pair):
            carry, y = predict(J, params, carry, pair[0])
            return carry, J.sum(pair[1] * (y - lse(J, y)))

        init = (tuple(state[0::2]), tuple(state[1::2]))
        _, terms = jax.lax.scan(step, init, (sequence[:-1], sequence[1:]))
        return -J.sum(terms) / ((sequence.shape[0] - 1) * b)

    step = jax.jit(jax.value_and_grad(loss))

    def run(inp):
        value, (gm, ge) = step((inp["main_params"], inp["extra_params"]), inp["state"], inp["sequence"])
        return float(value), {"main_params": np.asarray(gm), "extra_params": np.asarray(ge)}

    return run


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


def numpy(inp):
    W, E, state, seq = inp["main_params"], inp["extra_params"], inp["state"], inp["sequence"]
    layers, b = W.shape[0] // 2, W.shape[1] // 4
    count = (seq.shape[0] - 1) * b
    h = [state[2 * i].copy() for i in range(layers)]
    c = [state[2 * i + 1].copy() for i in range(layers)]
    tape, total = [], 0.0
    for t in range(seq.shape[0] - 1):
        x = seq[t] * E[0]
        steps = []
        for i in range(layers):
            w, bias = W[2 * i], W[2 * i + 1]
            f = _sigmoid(x * w[:b] + bias[:b])
            ig = _sigmoid(h[i] * w[b : 2 * b] + bias[b : 2 * b])
            o = _sigmoid(x * w[2 * b : 3 * b] + bias[2 * b : 3 * b])
            ch = np.tanh(h[i] * w[3 * b :] + bias[3 * b :])
            cn = c[i] * f + ig * ch
            tc = np.tanh(cn)
            steps.append((x, h[i], c[i], f, ig, o, ch, tc))
            h[i], c[i] = o * tc, cn
            x = h[i]
        y = x * E[1] + E[2]
        total += np.sum(seq[t + 1] * (y - np.log(np.exp(y).sum() + 2)))
        tape.append((steps, x, y))
    dW, dE = np.zeros_like(W), np.zeros_like(E)
    dh = [np.zeros(b) for _ in range(layers)]
    dc = [np.zeros(b) for _ in range(layers)]
    for t in reversed(range(seq.shape[0] - 1)):
        steps, top, y = tape[t]
        gold = seq[t + 1]
        soft = np.exp(y)
        soft /= soft.sum() + 2  # d lse / dy
        dy = -(gold - soft * gold.sum()) / count
        dE[1] += dy * top
        dE[2] += dy
        dh[-1] = dh[-1] + dy * E[1]
        for i in reversed(range(layers)):
            x, hp, cp, f, ig, o, ch, tc = steps[i]
            w = W[2 * i]
            dcn = dc[i] + dh[i] * o * (1 - tc * tc)
            da_f = dcn * cp * f * (1 - f)
            da_i = dcn * ch * ig * (1 - ig)
            da_o = dh[i] * tc * o * (1 - o)
            da_c = dcn * ig * (1 - ch * ch)
            dW[2 * i] += np.concatenate([da_f * x, da_i * hp, da_o * x, da_c * hp])
            dW[2 * i + 1] += np.concatenate([da_f, da_i, da_o, da_c])
            dx = da_f * w[:b] + da_o * w[2 * b : 3 * b]
            dh[i] = da_i * w[b : 2 * b] + da_c * w[3 * b :]
            dc[i] = dcn * f
            if i > 0:
                dh[i - 1] = dh[i - 1] + dx
            else:
                dE[0] += dx * seq[t]
    return float(-total / count), {"main_params": dW, "extra_params": dE}


def inputs(c, rng, layers=LAYERS, b=HIDDEN):
    return {
        "main_params": rng.uniform(-1, 1, (2 * layers, 4 * b)),
        "extra_params": rng.uniform(-1, 1, (3, b)),
        "state": rng.uniform(-1, 1, (2 * layers, b)),
        "sequence": rng.uniform(-1, 1, (c, b)),
    }


PROBLEMS = [
    Problem(
        "lstm",
        f"ADBench's diagonal LSTM, {LAYERS} layers, hidden size {HIDDEN} (GradBench lstm)",
        "c, the sequence length",
        [64, 256],
        [32],
        inputs,
        numpy,
        objective,
        wrt=("main_params", "extra_params"),
        jax=jax_system,
    ),
]
