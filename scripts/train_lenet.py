#!/usr/bin/env python
"""Train LeNet-86 on Fashion-MNIST (86x86) and write it in the course's parameter format.

The network is exactly the one the book's kernels compute (conv 4@7x7 and 16@7x7 without
bias, max-pool 2 and 4 with a partial last window, fc 1296->32->10) and it is trained on
exactly what inference sees: float32 pixels in 0..255, not normalised.

Training directly on 0..255 with Adam would move conv1 far too fast (its inputs are ~255x
larger than usual), so conv1 is initialised 255x smaller and gets a 255x smaller learning
rate. With Adam (invariant to the gradient's scale) that is the same trajectory as training
on x/255 with ordinary settings, but the saved weights need no conversion afterwards.

The result is evaluated with the NumPy reference (kernelbook.lenet.reference), not with PyTorch,
so the reported accuracy is the one the book's checks reproduce.

    python scripts/train_lenet.py                 # about 5-6 minutes on 2 CPU cores
    python scripts/train_lenet.py --epochs 8 --out /tmp/lenet86.bin
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run from a checkout without installing

from kernelbook import data, reference  # noqa: E402
from kernelbook.lenet.weights import LeNetWeights, default_weights_path, write_weights  # noqa: E402

try:
    import torch
    from torch import nn
except ImportError:  # optional dependency: only this script needs it
    sys.exit("train_lenet.py needs PyTorch, which is not installed. Fix: pip install torch "
             "(or pip install -e '.[train]'), then run the script again.")

PIXEL_SCALE = 255.0  # conv1 sees raw 0..255 pixels; see the module docstring
MIN_ACCURACY = 0.88


class LeNet86(nn.Module):
    """The course's network, layer for layer."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 7, bias=False)
        self.conv2 = nn.Conv2d(4, 16, 7, bias=False)
        self.pool1 = nn.MaxPool2d(2, 2)
        self.pool2 = nn.MaxPool2d(4, 4, ceil_mode=True)  # 34 -> 9, keeping the partial window
        self.fc1 = nn.Linear(16 * 9 * 9, 32)
        self.fc2 = nn.Linear(32, 10)
        with torch.no_grad():
            self.conv1.weight /= PIXEL_SCALE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(torch.relu(self.conv1(x)))
        x = self.pool2(torch.relu(self.conv2(x)))
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)

    def to_weights(self) -> LeNetWeights:
        """Export in the course layout; conv biases do not exist here and are stored as zeros."""

        def arr(t: torch.Tensor) -> np.ndarray:
            return t.detach().cpu().numpy().astype(np.float32).copy()

        return LeNetWeights(
            conv1=arr(self.conv1.weight),
            conv1_bias=np.zeros(4, dtype=np.float32),
            conv2=arr(self.conv2.weight),
            conv2_bias=np.zeros(16, dtype=np.float32),
            fc1=arr(self.fc1.weight),  # nn.Linear stores (out, in): index o*n_in + i, as the file wants
            fc1_bias=arr(self.fc1.bias),
            fc2=arr(self.fc2.weight),
            fc2_bias=arr(self.fc2.bias),
        ).validate()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (conv1 gets lr/255)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--train-images", type=Path, default=None, help="IDX images file (28x28 or 86x86)")
    parser.add_argument("--train-labels", type=Path, default=None, help="IDX labels file")
    parser.add_argument("--out", type=Path, default=default_weights_path())
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.lr <= 0 or args.threads < 1:
        parser.error("--epochs, --batch-size, --threads must be >= 1 and --lr > 0")
    return args


def train(model: LeNet86, images: np.ndarray, labels: np.ndarray, args: argparse.Namespace) -> None:
    """Adam with a cosine-decayed learning rate; prints one line per epoch."""
    optimizer = torch.optim.Adam(
        [
            {"params": [model.conv1.weight], "lr": args.lr / PIXEL_SCALE},
            {"params": [p for name, p in model.named_parameters() if name != "conv1.weight"], "lr": args.lr},
        ]
    )
    steps_per_epoch = (len(images) + args.batch_size - 1) // args.batch_size
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * steps_per_epoch)
    loss_fn = nn.CrossEntropyLoss()
    images_t = torch.from_numpy(images)  # uint8, 1 byte per pixel; converted per batch
    labels_t = torch.from_numpy(labels)
    generator = torch.Generator().manual_seed(args.seed)
    model.train()
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        order = torch.randperm(len(images_t), generator=generator)
        total_loss, correct = 0.0, 0
        for first in range(0, len(order), args.batch_size):
            index = order[first : first + args.batch_size]
            x = images_t[index].unsqueeze(1).float()
            y = labels_t[index]
            logits = model(x)
            loss = loss_fn(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            if not torch.isfinite(loss):
                sys.exit(f"Training diverged at epoch {epoch} (loss {loss.item()}). Fix: lower --lr.")
            total_loss += loss.item() * len(index)
            correct += int((logits.argmax(1) == y).sum())
        print(
            f"epoch {epoch}/{args.epochs}: loss {total_loss / len(order):.4f}, "
            f"train accuracy {correct / len(order):.4f}, {time.perf_counter() - start:.0f} s",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    started = time.perf_counter()
    images, labels = data.load_split_uint8("train", args.train_images, args.train_labels)
    print(f"training set: {images.shape[0]} images of 86x86 ({time.perf_counter() - started:.0f} s to load)", flush=True)

    model = LeNet86()
    train_start = time.perf_counter()
    train(model, images, labels, args)
    train_seconds = time.perf_counter() - train_start
    weights = model.to_weights()
    write_weights(args.out, weights)
    print(f"wrote {args.out} after {train_seconds:.0f} s of training", flush=True)

    test_images, test_labels = data.load_test_set()
    logits = reference.forward_reference(test_images, weights)
    model.eval()
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(test_images[:500])).numpy()
    drift = float(np.max(np.abs(torch_logits - logits[:500])))
    print(f"NumPy reference vs PyTorch logits on 500 test images: max |diff| = {drift:.2e}")
    acc = reference.accuracy(logits.argmax(1), test_labels)
    print(f"test accuracy (NumPy reference, {len(test_labels)} images): {acc:.4f}")
    if drift > 1e-2:
        print("The exported weights do not reproduce PyTorch's logits: the export layout is wrong.", file=sys.stderr)
        return 1
    if acc < MIN_ACCURACY:
        print(f"Accuracy {acc:.4f} < {MIN_ACCURACY}. Fix: train longer, e.g. --epochs {args.epochs * 2}.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
