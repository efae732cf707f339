"""cuDNN on the LeNet layers (through ``torch.nn.functional.conv2d``): the vendor comparison."""

from __future__ import annotations

from .problem import LAYERS, check_batch, layer_shape

VENDOR_VARIANTS = (("cudnn-fp32", False), ("cudnn-tf32", True))


def vendor_runs(batch_sizes, seed: int = 0):
    """cuDNN on the network's two layers at each batch: ``cudnn-fp32`` (TF32 forbidden) and
    ``cudnn-tf32`` (TF32 allowed), each with ``cudnn.benchmark`` on so cuDNN picks its fastest
    algorithm during the warm-up; checked against float64 (rel. L2 error). The harness times
    them (``measure.time_torch``)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from ..harness import VendorRun
    from ..measure import torch_flags

    rng = np.random.default_rng(seed)
    device = torch.device("cuda")
    with torch_flags(torch, benchmark=True) as flags:
        for variant, tf32 in VENDOR_VARIANTS:
            flags.tf32(tf32)
            for batch in batch_sizes:
                check_batch(batch)
                for layer in LAYERS:
                    shape = layer_shape(layer, batch)
                    x = torch.from_numpy(rng.uniform(0, 1, size=shape.x_shape).astype(np.float32)).to(device)
                    w = torch.from_numpy(rng.uniform(-1, 1, size=shape.k_shape).astype(np.float32)).to(device)

                    def accuracy(y, x=x, w=w):
                        ref = F.conv2d(x.double(), w.double())
                        return {"rel_l2_error": float(torch.linalg.vector_norm(y.double() - ref)
                                                      / torch.linalg.vector_norm(ref))}

                    yield VendorRun(variant, layer, batch, shape, lambda x=x, w=w: F.conv2d(x, w), accuracy,
                                    extra={"tf32": tf32})
                    del x, w
            torch.cuda.empty_cache()
