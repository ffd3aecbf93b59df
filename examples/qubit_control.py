"""Quantum optimal control of a two-level system with complex tensors: find the drive amplitudes
of a piecewise-constant pulse that take a detuned qubit from |0> to |1>.

Each time slice evolves the state by exp(-i H dt), H = (omega_x X + omega_y Y + delta Z) / 2,
written in closed form for a 2x2 Hamiltonian. The infidelity 1 - |<1|psi>|^2 is a real function
of complex values; its gradient with respect to the real amplitudes flows back through complex
matrix products, conjugates and moduli by PyTorch's convention for complex gradients.

Run: python examples/qubit_control.py
"""

import numpy as np

import ngrad as torch

X = torch.tensor([[0, 1], [1, 0]], dtype=torch.complex128)
Y = torch.tensor([[0, -1j], [1j, 0]], dtype=torch.complex128)
Z = torch.tensor([[1, 0], [0, -1]], dtype=torch.complex128)
EYE = torch.eye(2, dtype=torch.complex128)


def step(omega_x, omega_y, delta, dt):
    """exp(-i H dt) for H = (omega_x X + omega_y Y + delta Z) / 2: cos(r) I - i sin(r) (n . sigma)."""
    r = 0.5 * dt * torch.sqrt(omega_x**2 + omega_y**2 + delta**2)
    generator = (omega_x * X + omega_y * Y + delta * Z) * (0.5 * dt)
    return torch.cos(r) * EYE - 1j * (torch.sin(r) / r) * generator


def infidelity(amplitudes, delta=0.6, duration=3.0):
    """1 - |<1| U |0>|^2 after the pulse (``amplitudes``: (slices, 2) real x and y drives)."""
    dt = duration / amplitudes.shape[0]
    psi = torch.tensor([1, 0], dtype=torch.complex128)
    for k in range(amplitudes.shape[0]):
        psi = step(amplitudes[k, 0], amplitudes[k, 1], torch.tensor(delta, dtype=torch.float64), dt) @ psi
    overlap = psi[1]
    return 1 - (overlap * overlap.conj()).real


def optimize(slices=12, steps=150, lr=0.1, seed=0):
    rng = np.random.default_rng(seed)
    amplitudes = torch.tensor(0.3 * rng.standard_normal((slices, 2)), requires_grad=True)
    opt = torch.optim.Adam([amplitudes], lr=lr)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        loss = infidelity(amplitudes)
        loss.backward()
        opt.step()
        history.append(loss.item())
    return amplitudes.detach().numpy(), history


if __name__ == "__main__":
    amplitudes, history = optimize()
    print(f"infidelity: start {history[0]:.4f}, end {history[-1]:.2e}")
