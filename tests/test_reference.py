"""The NumPy reference against deliberately naive loop versions written here, and the shipped weights."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelbook.errors import ShapeError
from kernelbook.lenet import reference
from kernelbook.lenet.reference import accuracy, conv2d_reference, forward_reference, max_pool, predict
from kernelbook.lenet.weights import LeNetWeights, default_weights_path, read_weights

# --------------------------------------------------------------------------- naive versions


def naive_conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Scalar loops straight from the definition: out[b,m,h,w] = sum x[b,c,h+p,w+q] * w[m,c,p,q]."""
    batch, channels, height, width = x.shape
    maps, _, kh, kw = w.shape
    out = np.zeros((batch, maps, height - kh + 1, width - kw + 1))
    for b in range(batch):
        for m in range(maps):
            for h in range(height - kh + 1):
                for col in range(width - kw + 1):
                    total = 0.0
                    for c in range(channels):
                        for p in range(kh):
                            for q in range(kw):
                                total += float(x[b, c, h + p, col + q]) * float(w[m, c, p, q])
                    out[b, m, h, col] = total
    return out


def naive_conv_windows(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Shift and add: for each kernel offset (p, q), the input shifted by it times that tap of every
    weight, summed over the channels. Fast enough for 86x86, and built another way than both the
    scalar loops above and the package's windows (``sliding_window_view``)."""
    batch, _, height, width = x.shape
    maps, _, k, _ = w.shape
    rows, cols = height - k + 1, width - k + 1
    out = np.zeros((maps, batch, rows, cols))
    for p in range(k):
        for q in range(k):
            out += np.tensordot(w[:, :, p, q].astype(np.float64), x[:, :, p : p + rows, q : q + cols], axes=([1], [1]))
    return out.transpose(1, 0, 2, 3)


def naive_pool(x: np.ndarray, size: int) -> np.ndarray:
    """Each window clipped at the border, so the last one may be partial."""
    *lead, height, width = x.shape
    out_h, out_w = math.ceil(height / size), math.ceil(width / size)
    out = np.zeros((*lead, out_h, out_w), dtype=x.dtype)
    for index in np.ndindex(*lead):
        for i in range(out_h):
            for j in range(out_w):
                best = -math.inf
                for h in range(i * size, min(i * size + size, height)):
                    for col in range(j * size, min(j * size + size, width)):
                        best = max(best, float(x[index + (h, col)]))
                out[index + (i, j)] = best
    return out


def naive_fc(v: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    out = np.zeros(weight.shape[0])
    for o in range(weight.shape[0]):
        out[o] = float(bias[o]) + sum(float(weight[o, i]) * float(v[i]) for i in range(weight.shape[1]))
    return out


def naive_forward(image: np.ndarray, w: LeNetWeights) -> np.ndarray:
    """One (1, 86, 86) image through the network, float64, loops only; conv biases ignored."""
    x = image.astype(np.float64)[None]
    h = naive_pool(np.maximum(naive_conv_windows(x, w.conv1.astype(np.float64)), 0), 2)
    assert h.shape == (1, 4, 40, 40)
    h = naive_pool(np.maximum(naive_conv_windows(h, w.conv2.astype(np.float64)), 0), 4)
    assert h.shape == (1, 16, 9, 9)
    flat = np.zeros(1296)
    for c in range(16):
        for i in range(9):
            for j in range(9):
                flat[c * 81 + i * 9 + j] = h[0, c, i, j]
    hidden = np.maximum(naive_fc(flat, w.fc1, w.fc1_bias), 0)
    return naive_fc(hidden, w.fc2, w.fc2_bias)


def random_weights(seed: int) -> LeNetWeights:
    """Scaled so that 0..255 inputs give activations that are neither all dead nor huge."""
    rng = np.random.default_rng(seed)

    def arr(shape: tuple[int, ...], scale: float, shift: float = 0.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale + shift).astype(np.float32)

    return LeNetWeights(
        conv1=arr((4, 1, 7, 7), 0.01, 0.002),
        conv1_bias=arr((4,), 100.0),  # must be ignored by the network
        conv2=arr((16, 4, 7, 7), 0.05, 0.01),
        conv2_bias=arr((16,), 100.0),
        fc1=arr((32, 1296), 0.05),
        fc1_bias=arr((32,), 0.5),
        fc2=arr((10, 32), 0.3),
        fc2_bias=arr((10,), 0.5),
    )


# --------------------------------------------------------------------------- conv2d_reference


@pytest.mark.parametrize(
    "shape",
    [
        # (B, C, H, W, M, Kh, Kw)
        (2, 3, 9, 7, 4, 3, 3),  # non-square input
        (1, 1, 5, 5, 2, 1, 1),  # K = 1
        (3, 2, 6, 11, 5, 6, 6),  # K = H, wide input
        (1, 4, 8, 8, 3, 8, 8),  # K = H = W: a single output pixel
        (2, 1, 13, 4, 1, 4, 4),  # K = W, tall input
        (1, 2, 10, 9, 3, 7, 7),  # the network's kernel size
        (1, 2, 6, 7, 3, 2, 5),  # non-square kernel
    ],
)
def test_conv2d_reference_matches_naive_loops(shape: tuple[int, ...]) -> None:
    batch, channels, height, width, maps, kh, kw = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((batch, channels, height, width))
    w = rng.standard_normal((maps, channels, kh, kw))
    got = conv2d_reference(x, w)
    assert got.shape == (batch, maps, height - kh + 1, width - kw + 1)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, naive_conv(x, w), rtol=1e-12, atol=1e-12)


def test_conv2d_reference_computes_in_the_requested_dtype() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 12, 10)).astype(np.float32)
    w = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    exact = naive_conv(x, w)
    as64 = conv2d_reference(x, w)
    as32 = conv2d_reference(x, w, dtype=np.float32)
    assert as64.dtype == np.float64 and as32.dtype == np.float32
    np.testing.assert_allclose(as64, exact, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(as32, exact, rtol=1e-4, atol=1e-4)
    assert not np.array_equal(as32.astype(np.float64), as64)  # float32 really rounds


def test_conv2d_reference_blocking_does_not_change_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """Force the row-block and image-block paths that large shapes take."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 2, 15, 12))
    w = rng.standard_normal((3, 2, 4, 4))
    whole = conv2d_reference(x, w)
    per_row = 9 * 2 * 4 * 4  # out_w * C * Kh * Kw
    for budget in (1, 2 * per_row, 5 * per_row, 2 * 12 * per_row):  # 1, 2 or 5 rows; 2 images at a time
        monkeypatch.setattr(reference, "_IM2COL_BUDGET", budget)
        np.testing.assert_allclose(conv2d_reference(x, w), whole, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(whole, naive_conv(x, w), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "needle"),
    [
        ((1, 1, 5, 5), (1, 1, 6, 6), "larger than"),  # K > H and K > W
        ((1, 1, 8, 5), (1, 1, 6, 6), "larger than"),  # K > W only
        ((1, 3, 8, 8), (2, 2, 3, 3), "C=3 channels"),
        ((3, 8, 8), (2, 3, 3, 3), "4-D"),
        ((1, 3, 8, 8), (3, 3, 3), "4-D"),
        ((0, 1, 8, 8), (1, 1, 3, 3), ">= 1"),
        ((1, 1, 8, 8), (0, 1, 3, 3), ">= 1"),
    ],
)
def test_conv2d_reference_rejects_bad_shapes(x_shape: tuple[int, ...], w_shape: tuple[int, ...], needle: str) -> None:
    with pytest.raises(ShapeError, match=needle) as info:
        conv2d_reference(np.zeros(x_shape), np.zeros(w_shape))
    assert "Fix:" in str(info.value)


# --------------------------------------------------------------------------- pooling


@pytest.mark.parametrize(("shape", "size"), [((2, 3, 34, 34), 4), ((1, 4, 80, 80), 2), ((5, 7), 3), ((3, 1), 2)])
def test_max_pool_matches_naive(shape: tuple[int, ...], size: int) -> None:
    x = np.random.default_rng(len(shape) * size).standard_normal(shape)
    got = max_pool(x, size)
    np.testing.assert_array_equal(got, naive_pool(x, size))


def test_max_pool_keeps_the_partial_last_window() -> None:
    x = np.zeros((34, 34))
    x[33, 33] = 5.0  # only the 9th row/column window sees it
    x[32, 0] = 3.0
    out = max_pool(x, 4)
    assert out.shape == (9, 9)
    assert out[8, 8] == 5.0 and out[8, 0] == 3.0 and out.sum() == 8.0
    negative = -np.ones((34, 34))
    assert np.all(max_pool(negative, 4) == -1)  # padding never wins
    ints = np.arange(25, dtype=np.int32).reshape(5, 5) - 100
    assert max_pool(ints, 2).tolist() == [[-94, -92, -91], [-84, -82, -81], [-79, -77, -76]]


def test_max_pool_rejects_bad_size() -> None:
    for size in (0, -2, 1.5):
        with pytest.raises(ShapeError, match="Fix:"):
            max_pool(np.zeros((4, 4)), size)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- network


@pytest.fixture(scope="module")
def tiny_batch() -> tuple[np.ndarray, LeNetWeights]:
    rng = np.random.default_rng(7)
    images = rng.integers(0, 256, size=(2, 1, 86, 86)).astype(np.float32)
    images[1, 0, :, :20] = 0  # a dark band, as real images have
    return images, random_weights(8)


def test_forward_matches_naive_network(tiny_batch: tuple[np.ndarray, LeNetWeights]) -> None:
    images, w = tiny_batch
    expected = np.stack([naive_forward(img, w) for img in images])
    # the random network is alive: distinct logits per image and per class
    assert np.ptp(expected) > 1.0 and not np.allclose(expected[0], expected[1])
    got64 = forward_reference(images, w, dtype=np.float64)
    assert got64.shape == (2, 10) and got64.dtype == np.float64
    np.testing.assert_allclose(got64, expected, rtol=1e-10, atol=1e-9)
    got32 = forward_reference(images, w)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, expected, rtol=1e-4, atol=1e-3 * np.abs(expected).max())
    assert predict(images, w).tolist() == expected.argmax(axis=1).tolist()


def test_forward_chunking_and_3d_input(tiny_batch: tuple[np.ndarray, LeNetWeights]) -> None:
    images, w = tiny_batch
    batch = np.concatenate([images, images[::-1], images])
    whole = forward_reference(batch, w, dtype=np.float64, chunk=256)
    np.testing.assert_allclose(forward_reference(batch, w, dtype=np.float64, chunk=1), whole, rtol=1e-12)
    np.testing.assert_allclose(forward_reference(batch[:, 0], w, dtype=np.float64, chunk=4), whole, rtol=1e-12)
    np.testing.assert_allclose(whole[0], whole[3], rtol=1e-12)


def test_conv_biases_are_not_applied(tiny_batch: tuple[np.ndarray, LeNetWeights]) -> None:
    images, w = tiny_batch
    before = forward_reference(images, w, dtype=np.float64)
    w2 = LeNetWeights(**{**w.__dict__, "conv1_bias": w.conv1_bias * 0 - 1e6, "conv2_bias": w.conv2_bias * 0 + 1e6})
    np.testing.assert_array_equal(forward_reference(images, w2, dtype=np.float64), before)
    w3 = LeNetWeights(**{**w.__dict__, "fc2_bias": w.fc2_bias + 1})  # an fc bias, by contrast, is applied
    np.testing.assert_allclose(forward_reference(images, w3, dtype=np.float64), before + 1, rtol=0, atol=1e-4)


@pytest.mark.parametrize("shape", [(2, 1, 28, 28), (2, 3, 86, 86), (0, 1, 86, 86), (86, 86)])
def test_forward_rejects_bad_images(shape: tuple[int, ...], tiny_batch: tuple[np.ndarray, LeNetWeights]) -> None:
    with pytest.raises(ShapeError, match=r"\(N, 1, 86, 86\).*Fix:"):
        forward_reference(np.zeros(shape, dtype=np.float32), tiny_batch[1])


def test_accuracy() -> None:
    assert accuracy(np.array([1, 2, 3, 4]), np.array([1, 2, 0, 4])) == 0.75
    with pytest.raises(ShapeError, match="Fix:"):
        accuracy(np.array([1, 2]), np.array([1, 2, 3]))
    with pytest.raises(ShapeError, match="Fix:"):
        accuracy(np.array([]), np.array([]))


# --------------------------------------------------------------------------- shipped weights


@pytest.mark.slow
def test_shipped_weights_reach_088_on_the_test_set() -> None:
    from kernelbook.lenet.data import load_test_set

    path = default_weights_path()
    assert path.is_file(), f"{path} is missing: run python scripts/train_lenet.py"
    weights = read_weights(path)
    assert np.all(weights.conv1_bias == 0) and np.all(weights.conv2_bias == 0)
    images, labels = load_test_set()
    pred = predict(images, weights)
    acc = accuracy(pred, labels)
    assert acc >= 0.88, f"accuracy {acc:.4f} < 0.88"
    assert len(np.unique(pred)) == 10
