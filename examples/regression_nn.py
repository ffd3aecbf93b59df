"""Fit a noisy 1-D function with a PyTorch-style training script: ``nn.Sequential``,
``nn.MSELoss``, ``optim.Adam`` and a shuffled ``DataLoader``, written as it would be for
PyTorch (``import ngrad as torch``). The model is saved with ``torch.save`` and read back.

Run: python examples/regression_nn.py
"""

import io

import numpy as np

import ngrad as torch
from ngrad import nn
from ngrad.utils.data import DataLoader, TensorDataset


def make_data(n=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, (n, 1))
    y = np.sin(x) + 0.3 * x + 0.05 * rng.standard_normal((n, 1))
    return TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32))


def train(epochs=40, batch_size=32, lr=1e-2, seed=0):
    """Train and return (mean loss of the first epoch, of the last epoch, test loss of the
    reloaded model)."""
    torch.manual_seed(seed)
    data = make_data(seed=seed)
    loader = DataLoader(data, batch_size=batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
    loss_fn = nn.MSELoss()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    for _ in range(epochs):
        total = 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item() * len(x)
        history.append(total / len(data))

    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    copy = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
    copy.load_state_dict(torch.load(buf))
    test = make_data(n=128, seed=seed + 1)
    with torch.no_grad():
        x, y = test.tensors
        test_loss = loss_fn(copy(x), y).item()
    return history[0], history[-1], test_loss


if __name__ == "__main__":
    first, last, test = train()
    print(f"mse {first:.4f} -> {last:.4f} (held out: {test:.4f})")
