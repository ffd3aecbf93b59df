"""Tell sine, square and sawtooth waves apart with a 1-D convolutional network, written as a
PyTorch script (``import ngrad as torch``): ``nn.Sequential`` of ``Conv1d``, ``ReLU``,
``MaxPool1d`` and ``Linear``, ``nn.CrossEntropyLoss``, ``optim.Adam`` and a shuffled
``DataLoader``. Each signal has a random frequency, phase, amplitude and noise, so the network
must learn the waves' shapes, not their positions.

Run: python examples/cnn1d.py
"""

import numpy as np

import ngrad as torch
from ngrad import nn
from ngrad.utils.data import DataLoader, TensorDataset

LENGTH = 64
CLASSES = ("sine", "square", "sawtooth")


def make_data(n=384, seed=0):
    """``n`` signals of shape (1, LENGTH) and their class (0 sine, 1 square, 2 sawtooth)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), n)
    t = np.arange(LENGTH) / LENGTH
    cycles = rng.uniform(2, 5, (n, 1))
    phase = rng.uniform(0, 1, (n, 1))
    u = (cycles * t + phase) % 1.0  # position in the period, in [0, 1)
    waves = np.stack([np.sin(2 * np.pi * u), np.where(u < 0.5, 1.0, -1.0), 2 * u - 1])
    x = waves[labels, np.arange(n)] * rng.uniform(0.5, 1.5, (n, 1)) + 0.1 * rng.standard_normal((n, LENGTH))
    return TensorDataset(torch.tensor(x[:, None, :], dtype=torch.float32), torch.tensor(labels))


def make_model():
    return nn.Sequential(
        nn.Conv1d(1, 8, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Conv1d(8, 16, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool1d(4),
        nn.Flatten(),
        nn.Linear(16 * LENGTH // 8, len(CLASSES)),
    )


def train(epochs=8, batch_size=32, lr=3e-3, seed=0):
    """Train and return (mean loss of the first epoch, of the last epoch, accuracy on
    held-out signals)."""
    torch.manual_seed(seed)
    data = make_data(seed=seed)
    loader = DataLoader(data, batch_size=batch_size, shuffle=True)
    model = make_model()
    loss_fn = nn.CrossEntropyLoss()
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
    model.eval()
    x, y = make_data(n=256, seed=seed + 1).tensors
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    return history[0], history[-1], accuracy


if __name__ == "__main__":
    first, last, accuracy = train()
    print(f"cross entropy {first:.3f} -> {last:.3f}; held-out accuracy {accuracy:.1%}")
