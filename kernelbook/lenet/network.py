"""The LeNet-86 forward pass on the GPU: the two convolutions use a step's kernels, the rest
(ReLU, pooling, the fully connected layers, argmax) runs in CuPy.

    1x86x86 -> C1 conv 4@7x7 (no bias) -> ReLU -> max-pool 2 -> 4x40x40
            -> C3 conv 16@7x7 (no bias) -> ReLU -> max-pool 4, partial last window kept -> 16x9x9
            -> FC 1296->32 + bias -> ReLU -> FC 32->10 + bias -> argmax
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..steps import renamed
from . import conv_forward, get_step
from .weights import LeNetWeights


def max_pool(x, size: int):
    """Max-pool (B,C,H,W) by ``size`` with stride ``size``, keeping a partial last window."""
    import cupy as cp

    B, C, H, W = x.shape
    Ho, Wo = -(-H // size), -(-W // size)
    if Ho * size != H or Wo * size != W:
        padded = cp.full((B, C, Ho * size, Wo * size), -cp.inf, dtype=x.dtype)
        padded[:, :, :H, :W] = x
        x = padded
    return x.reshape(B, C, Ho, size, Wo, size).max(axis=(3, 5))


@dataclass
class GpuLeNet:
    """Weights on the device once; ``step`` and its parameters choose the conv kernels (``variant``
    is its deprecated name, kept one release).

    ``layer_params`` may give ``C1`` or ``C3`` parameters of their own (e.g. the best block
    shape per layer found by a sweep); otherwise ``params`` applies to both.
    """

    weights: LeNetWeights
    step: str = "baseline"
    params: dict = field(default_factory=dict)
    layer_params: dict = field(default_factory=dict)
    variant: str | None = None

    def __post_init__(self) -> None:
        import cupy as cp

        if self.variant is not None:
            self.step, self.variant = renamed("GpuLeNet(variant=...)", "GpuLeNet(step=...)", self.variant), None

        self.weights.validate()
        impl = get_step(self.step)
        self._params = {layer: impl.params(**{**self.params, **self.layer_params.get(layer, {})})
                        for layer in ("C1", "C3")}
        from . import layer_shape

        for layer, merged in self._params.items():
            impl.prepare(merged, layer_shape(layer, 1))  # compile before anything is timed
        w = self.weights
        self.k1 = cp.asarray(np.ascontiguousarray(w.conv1, dtype=np.float32))
        self.k3 = cp.asarray(np.ascontiguousarray(w.conv2, dtype=np.float32))
        self.fc1 = cp.asarray(np.ascontiguousarray(w.fc1, dtype=np.float32))
        self.fc1_bias = cp.asarray(np.asarray(w.fc1_bias, dtype=np.float32))
        self.fc2 = cp.asarray(np.ascontiguousarray(w.fc2, dtype=np.float32))
        self.fc2_bias = cp.asarray(np.asarray(w.fc2_bias, dtype=np.float32))

    def conv1(self, x, out=None):
        return conv_forward(x, self.k1, self.step, out=out, **self._params["C1"])

    def conv3(self, x, out=None):
        return conv_forward(x, self.k3, self.step, out=out, **self._params["C3"])

    def stage2_input(self, x):
        """What C3 sees: ReLU and 2x2 pooling of C1's output (B,4,40,40)."""
        import cupy as cp

        return cp.ascontiguousarray(max_pool(cp.maximum(self.conv1(x), 0), 2))

    def logits(self, x):
        """Device images (B,1,86,86) float32 -> device logits (B,10)."""
        import cupy as cp

        h = self.stage2_input(x)
        h = max_pool(cp.maximum(self.conv3(h), 0), 4)
        h = h.reshape(h.shape[0], -1)
        h = cp.maximum(h @ self.fc1.T + self.fc1_bias, 0)
        return h @ self.fc2.T + self.fc2_bias

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Host images -> host predictions: the whole inference the Total Execution Time covers."""
        import cupy as cp

        x = cp.asarray(images, dtype=cp.float32)
        return cp.argmax(self.logits(x), axis=1).get()
