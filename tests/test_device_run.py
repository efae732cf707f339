"""scripts/device_run.sh: the per-study lists of the sanitizer (SANITIZE_STEPS / SANITIZE_LAYERS)."""

import subprocess

from kernelbook import paths


def for_study(module: str, entries: str) -> str:
    script = paths.REPO_ROOT / "scripts" / "device_run.sh"
    body = subprocess.run(["sed", "-n", "/^for_study()/,/^}/p", str(script)], capture_output=True, text=True,
                          check=True).stdout
    assert body.strip(), "device_run.sh lost its for_study function"
    out = subprocess.run(["bash", "-c", body + '\nfor_study "$1" "$2"', "_", module, entries],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_prefixed_entries_go_to_their_study_only():
    entries = "vgg:hopper-tf32,vgg:hopper-fp16,mlp:final-full-range"
    assert for_study("kernelbook.vgg", entries) == "hopper-tf32,hopper-fp16"
    assert for_study("kernelbook.mlp", entries) == "final-full-range"
    assert for_study("kernelbook.lenet", entries) == ""


def test_plain_entries_go_to_every_study():
    assert for_study("kernelbook.lenet", "baseline,vgg:hopper-tf32") == "baseline"
    assert for_study("kernelbook.vgg", "B1") == "B1"
    assert for_study("kernelbook.vgg", "") == ""
