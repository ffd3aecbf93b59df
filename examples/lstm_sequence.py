"""Teach an LSTM to continue sine waves of unknown frequency and phase: at every step it reads
one value and predicts the next. A PyTorch-style script (``import ngrad as torch``): ``nn.LSTM``
with ``batch_first=True``, a ``nn.Linear`` head, ``nn.MSELoss`` and ``optim.Adam``, the
training step compiled once with ``ngrad.compile`` and replayed.

Run: python examples/lstm_sequence.py
"""

import numpy as np

import ngrad as torch
from ngrad import nn


def make_data(n, steps=24, seed=0):
    """(inputs, targets), each (n, steps, 1): targets are the inputs one step later."""
    rng = np.random.default_rng(seed)
    freq = rng.uniform(0.3, 0.9, (n, 1))
    phase = rng.uniform(0, 2 * np.pi, (n, 1))
    wave = np.sin(freq * np.arange(steps + 1) + phase)[..., None]
    return torch.tensor(wave[:, :-1], dtype=torch.float32), torch.tensor(wave[:, 1:], dtype=torch.float32)


class Forecaster(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out)


def train(steps=150, lr=2e-2, seed=0):
    """Train; return (loss of the first step, of the last, held-out loss, held-out loss of
    repeating the last value)."""
    torch.manual_seed(seed)
    x, y = make_data(64, seed=seed)
    model = Forecaster()
    loss_fn = nn.MSELoss()
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    @torch.compile
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    losses = [step(x, y).item() for _ in range(steps)]
    test_x, test_y = make_data(64, seed=seed + 1)
    with torch.no_grad():
        held_out = loss_fn(model(test_x), test_y).item()
        repeat = loss_fn(test_x, test_y).item()
    return losses[0], losses[-1], held_out, repeat


if __name__ == "__main__":
    first, last, held_out, repeat = train()
    print(f"mse {first:.4f} -> {last:.4f}; held out {held_out:.4f} (repeating the last value: {repeat:.4f})")
