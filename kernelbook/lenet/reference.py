"""The CPU reference for LeNet-86, in NumPy.

Every GPU kernel in the book is checked against ``conv2d_reference`` computed in float64, and
the whole network's accuracy is measured with ``forward_reference``; both therefore favour
being obviously correct over being fast, but are vectorised (im2col + one matrix product) so
that the full 10k test set runs in seconds.

The network, as the course's GPU path computes it::

    1x86x86 -> conv 4@7x7 (no bias) -> ReLU -> max-pool 2/2    -> 4x40x40
            -> conv 16@7x7 (no bias) -> ReLU -> max-pool 4/4   -> 16x9x9  (34 -> 9: partial last window)
            -> flatten (c, h, w) = 1296 -> fc 32 + bias -> ReLU -> fc 10 + bias -> argmax
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import DTypeLike

from kernelbook.errors import ShapeError
from kernelbook.lenet.weights import LeNetWeights

INPUT_SHAPE = (1, 86, 86)
N_CLASSES = 10

# Largest im2col matrix built at once, in elements: bounds memory whatever the shapes.
_IM2COL_BUDGET = 1 << 22


def _check_dims(name: str, array: np.ndarray, ndim: int, layout: str) -> None:
    if array.ndim != ndim:
        raise ShapeError(f"{name} must be {ndim}-D {layout}, got shape {array.shape}.",
                         f"reshape {name} to {layout}, e.g. x[None] to add a batch axis.")
    if any(d <= 0 for d in array.shape):
        raise ShapeError(f"{name} has shape {array.shape}; every dimension must be >= 1.",
                         f"pass a non-empty {layout} array.")


def conv2d_reference(x: np.ndarray, w: np.ndarray, dtype: DTypeLike = np.float64) -> np.ndarray:
    """Valid (no padding, stride 1) cross-correlation, computed entirely in ``dtype``.

    ``out[b, m, h, w] = sum_{c, p, q} x[b, c, h + p, w + q] * w[m, c, p, q]`` for x of shape
    (B, C, H, W) and w of shape (M, C, Kh, Kw); the result has shape (B, M, H-Kh+1, W-Kw+1).
    No bias: the course's convolutions never apply one.
    """
    x = np.asarray(x)
    w = np.asarray(w)
    _check_dims("x", x, 4, "(B, C, H, W)")
    _check_dims("w", w, 4, "(M, C, K, K)")
    batch, channels, height, width = x.shape
    maps, w_channels, kh, kw = w.shape
    if w_channels != channels:
        raise ShapeError(f"x has C={channels} channels but w expects C={w_channels} (w shape {w.shape}).",
                         "pass weights whose second dimension equals the input's channel count.")
    if kh > height or kw > width:
        raise ShapeError(f"Kernel {kh}x{kw} is larger than the {height}x{width} input; a valid convolution "
                         "would have no output.", "use K <= H and K <= W (or pad the input first).")
    x = x.astype(dtype, copy=False)
    w_matrix = w.astype(dtype, copy=False).reshape(maps, channels * kh * kw).T  # (C*K*K, M)
    out_h, out_w = height - kh + 1, width - kw + 1
    out = np.empty((batch, maps, out_h, out_w), dtype=w_matrix.dtype)

    # im2col in blocks of whole images, or of output rows when one image alone is too large.
    per_row = out_w * channels * kh * kw
    rows = max(1, min(out_h, _IM2COL_BUDGET // per_row))
    images = max(1, _IM2COL_BUDGET // (per_row * out_h)) if rows == out_h else 1
    for b0 in range(0, batch, images):
        b1 = min(batch, b0 + images)
        for h0 in range(0, out_h, rows):
            h1 = min(out_h, h0 + rows)
            block = x[b0:b1, :, h0 : h1 + kh - 1, :]
            windows = sliding_window_view(block, (kh, kw), axis=(2, 3))  # (b, C, h, w, Kh, Kw)
            columns = windows.transpose(0, 2, 3, 1, 4, 5).reshape(-1, channels * kh * kw)
            result = (columns @ w_matrix).reshape(b1 - b0, h1 - h0, out_w, maps)
            out[b0:b1, :, h0:h1, :] = result.transpose(0, 3, 1, 2)
    return out


def max_pool(x: np.ndarray, size: int) -> np.ndarray:
    """Non-overlapping ``size`` x ``size`` max-pool over the last two axes, keeping partial windows.

    The output is ceil(H/size) x ceil(W/size): the course pools 34x34 by 4 into 9x9, the ninth
    window covering only rows (columns) 32..33.
    """
    x = np.asarray(x)
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ShapeError(f"max_pool size={size!r} is not a positive integer.", "pass size >= 1 (e.g. 2 or 4).")
    if x.ndim < 2 or x.shape[-1] <= 0 or x.shape[-2] <= 0:
        raise ShapeError(f"max_pool needs an array of at least 2 non-empty dimensions, got shape {x.shape}.",
                         "pass (..., H, W) with H, W >= 1.")
    height, width = x.shape[-2:]
    out_h, out_w = math.ceil(height / size), math.ceil(width / size)
    pad_h, pad_w = out_h * size - height, out_w * size - width
    if pad_h or pad_w:
        # Padding with the smallest value makes the partial windows the max over their real cells.
        low = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
        pad = [(0, 0)] * (x.ndim - 2) + [(0, pad_h), (0, pad_w)]
        x = np.pad(x, pad, mode="constant", constant_values=low)
    # Strided maxima (column offsets, then row offsets): several times faster than a reshape+max.
    cols = x[..., 0::size]
    for offset in range(1, size):
        cols = np.maximum(cols, x[..., offset::size])
    out = cols[..., 0::size, :]
    for offset in range(1, size):
        out = np.maximum(out, cols[..., offset::size, :])
    return out


def _as_images(images: np.ndarray) -> np.ndarray:
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[:, None, :, :]
    if images.ndim != 4 or images.shape[1:] != INPUT_SHAPE or images.shape[0] == 0:
        raise ShapeError(f"LeNet-86 takes images of shape (N, 1, 86, 86) with N >= 1, got {images.shape}.",
                         "pass load_test_set()'s images, or resize with kernelbook.data.resize_to_86.")
    return images


def forward_reference(
    images: np.ndarray, weights: LeNetWeights, dtype: DTypeLike = np.float32, chunk: int = 256
) -> np.ndarray:
    """Logits (N, 10) in ``dtype`` for images (N, 1, 86, 86) in 0..255, processed ``chunk`` at a time.

    Chunking keeps the intermediate maps (about 100 KB per image) small, so 10k images run in a
    few hundred MB whatever N is.
    """
    images = _as_images(images)
    weights.validate()
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ShapeError(f"chunk={chunk!r} is not a positive integer.", "pass chunk >= 1 (default 256).")
    dtype = np.dtype(dtype)
    fc1 = weights.fc1.astype(dtype)
    fc1_bias = weights.fc1_bias.astype(dtype)
    fc2 = weights.fc2.astype(dtype)
    fc2_bias = weights.fc2_bias.astype(dtype)
    logits = np.empty((images.shape[0], N_CLASSES), dtype=dtype)
    for start in range(0, images.shape[0], chunk):
        x = images[start : start + chunk].astype(dtype)
        h = max_pool(np.maximum(conv2d_reference(x, weights.conv1, dtype), 0), 2)  # (B, 4, 40, 40)
        h = max_pool(np.maximum(conv2d_reference(h, weights.conv2, dtype), 0), 4)  # (B, 16, 9, 9)
        flat = h.reshape(h.shape[0], -1)  # (c, h, w) order: 1296
        hidden = np.maximum(flat @ fc1.T + fc1_bias, 0)
        logits[start : start + chunk] = hidden @ fc2.T + fc2_bias
    return logits


def predict(images: np.ndarray, weights: LeNetWeights, dtype: DTypeLike = np.float32, chunk: int = 256) -> np.ndarray:
    """Predicted class (int64, N) per image: the argmax of ``forward_reference``'s logits."""
    return forward_reference(images, weights, dtype, chunk).argmax(axis=1).astype(np.int64)


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of ``pred`` equal to ``labels``."""
    pred = np.asarray(pred)
    labels = np.asarray(labels)
    if pred.ndim != 1 or pred.shape != labels.shape or pred.size == 0:
        raise ShapeError(f"accuracy needs two equal-length non-empty 1-D arrays, got {pred.shape} and {labels.shape}.",
                         "pass predict(...)'s output and the labels of the same images.")
    return float(np.mean(pred == labels))
