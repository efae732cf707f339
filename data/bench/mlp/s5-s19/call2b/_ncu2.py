# ncu target of calls 2 and 2b (session 5): the committed step 19 and the 3xTF32 layer-1 candidate,
# each launched twice at 2,097,152 columns; call 2 ran it without the two nospin() lines.
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np, cupy as cp
import bench_s19tf32 as t
b = t.b
rng = np.random.default_rng(3)
w = b.make_weights(rng)
n = b.N_LARGE
x = cp.asarray(rng.uniform(-1, 1, size=(71, n)).astype(np.float32))
y = cp.empty((4, n), cp.float32)
a, c = t.s19.Step19(3), t.Step19TF32(3)
t.nospin(a, "19_wgmma_full_range.cu", 3)
t.nospin(c, "_s19tf32.cu", 3)
for s in (a, c):
    p = s.prepare(w, None)
    s.launch(x, y, p, n)
    s.launch(x, y, p, n)
cp.cuda.Device().synchronize()
