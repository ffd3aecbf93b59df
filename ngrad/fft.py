"""``ngrad.fft``: PyTorch's ``torch.fft`` (discrete Fourier transforms with their derivatives)."""

__all__: list[str] = []
