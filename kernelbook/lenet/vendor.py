"""cuDNN on the LeNet layers (through ``torch.nn.functional.conv2d``): the vendor comparison."""

from __future__ import annotations

from .. import results
from .problem import LAYERS


def measure_cudnn(batch_sizes=(100, 1000, 10000), repeats: int = 10, warmup: int = 3, seed: int = 0) -> list[dict]:
    """cuDNN (through ``torch.nn.functional.conv2d``) on the network's two layers at each batch.

    Variants: ``cudnn`` (FP32, TF32 forbidden) and ``cudnn-tf32`` (TF32 allowed), each with
    ``cudnn.benchmark`` on so cuDNN picks its fastest algorithm during the warm-up. Timed with
    CUDA events per call (median of ``repeats``), checked against float64 (rel. L2 error).
    """
    import numpy as np
    import torch
    import torch.nn.functional as F

    from ..measure import Measured
    from . import check_batch, layer_shape

    flags = (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    rng = np.random.default_rng(seed)
    records = []
    device = torch.device("cuda")
    try:
        torch.backends.cudnn.benchmark = True
        for variant, tf32 in (("cudnn", False), ("cudnn-tf32", True)):
            torch.backends.cudnn.allow_tf32 = tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32
            for batch in batch_sizes:
                check_batch(batch)
                for layer in LAYERS:
                    shape = layer_shape(layer, batch)
                    x = torch.from_numpy(rng.uniform(0, 1, size=shape.x_shape).astype(np.float32)).to(device)
                    w = torch.from_numpy(rng.uniform(-1, 1, size=shape.k_shape).astype(np.float32)).to(device)
                    y = F.conv2d(x, w)
                    ref = F.conv2d(x.double(), w.double())
                    err = float(torch.linalg.vector_norm(y.double() - ref) / torch.linalg.vector_norm(ref))
                    del ref
                    for _ in range(warmup):
                        F.conv2d(x, w)
                    torch.cuda.synchronize()
                    samples = []
                    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    for _ in range(repeats):
                        start.record()
                        F.conv2d(x, w)
                        stop.record()
                        stop.synchronize()
                        samples.append(float(start.elapsed_time(stop)))
                    records.append(results.record("lenet", variant, layer, batch, "op_time_ms",
                                                  Measured(samples, extra={"timing": "torch-events"}),
                                                  flops=shape.flops, min_bytes=shape.min_bytes,
                                                  rel_l2_error=err, tf32=tf32))
                    records.append(results.record("lenet", variant, layer, batch, "rel_l2_error", err))
                    del x, w, y
            torch.cuda.empty_cache()
    finally:
        (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
         torch.backends.cuda.matmul.allow_tf32) = flags
    return records


