"""Register the ``kernelbook`` Jupyter kernel: this environment's Python, where kernelbook imports.

``make env`` runs ``python -m kernelbook.kernelspec`` (into this environment, so the Jupyter of
``.venv`` and papermill find it); ``python -m kernelbook.kernelspec --user`` registers it for a
Jupyter installed elsewhere, which then runs the chapters with this environment's Python.

The kernel starts with its own log at ERROR: the kernel app's one routine warning ("Kernel is
running over TCP without encryption", a local kernel on a local socket) is otherwise printed
once per notebook a batch executes. Warnings of the code in the cells are not affected.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .notebooks import KERNEL_DISPLAY, KERNEL_NAME


def install(user: bool = False) -> Path:
    from ipykernel.kernelspec import install as ipykernel_install

    folder = Path(ipykernel_install(kernel_name=KERNEL_NAME, display_name=KERNEL_DISPLAY, user=user,
                                    prefix=None if user else sys.prefix))
    spec_file = folder / "kernel.json"
    spec = json.loads(spec_file.read_text())
    spec["argv"][0] = sys.executable
    if "--IPKernelApp.log_level=ERROR" not in spec["argv"]:
        spec["argv"].append("--IPKernelApp.log_level=ERROR")
    spec_file.write_text(json.dumps(spec, indent=1) + "\n")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelbook.kernelspec", description=__doc__.split("\n")[0])
    parser.add_argument("--user", action="store_true", help="register for this user (a Jupyter outside .venv)")
    args = parser.parse_args(argv)
    folder = install(user=args.user)
    print(f"registered the Jupyter kernel '{KERNEL_NAME}' ({sys.executable}) in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
