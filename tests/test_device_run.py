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


def test_every_sanitizer_option_the_device_script_passes_is_one_sanitize_py_accepts():
    """The device script calls scripts/sanitize.py with options; a renamed option there (as
    --variants became --steps) fails only on the device, after the batch: caught here."""
    import re

    root = paths.REPO_ROOT / "scripts"
    script = (root / "device_run.sh").read_text()
    call = script[script.index("scripts/sanitize.py --study"):]
    call = call[:call.index("finish_step")]
    passed = set(re.findall(r"(--[a-z][a-z-]*)", call))
    assert {"--study", "--run-id", "--steps", "--layers"} <= passed
    helped = subprocess.run(["python3", str(root / "sanitize.py"), "--help"], capture_output=True, text=True,
                            cwd=paths.REPO_ROOT, env={"PYTHONPATH": str(paths.REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert helped.returncode == 0, helped.stderr
    for option in passed:
        assert option in helped.stdout, f"device_run.sh passes {option}, which scripts/sanitize.py does not accept"
