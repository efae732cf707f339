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


def test_the_pack_sends_back_runs_and_pages_in_pieces_the_device_lets_through(tmp_path):
    """The files that come back from the device are at most 8, each under its size limit: the runs
    and the logs are packed apart from the executed pages, in pieces that join again whole."""
    import os

    script = (paths.REPO_ROOT / "scripts" / "device_run.sh").read_text()
    head = script[:script.index("# 1. wheels")].replace('cd "$(dirname "${BASH_SOURCE[0]}")/.."', "")
    (tmp_path / "sim.sh").write_text(head + 'before=""\n' + script[script.index("# 5. pack"):])
    (tmp_path / "data" / "results" / "R1").mkdir(parents=True)
    (tmp_path / "data" / "results" / "R1" / "manifest.json").write_text("{}")
    (tmp_path / "_build" / "executed").mkdir(parents=True)
    pages = os.urandom(3 * 2**20 + 5)
    (tmp_path / "_build" / "executed" / "page.ipynb").write_bytes(pages)
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    for name in ("steps.txt", "batch.log", "device.txt", "sanitize-vgg.log"):
        (out / "logs" / name).write_text(name)
    done = subprocess.run(["bash", "sim.sh"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "OUT": str(out), "PIECE_MIB": "1"})
    assert done.returncode == 0, done.stderr
    sent = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert sent == ["executed.tar.gz.00", "executed.tar.gz.01", "executed.tar.gz.02", "executed.tar.gz.03",
                    "logs/batch.log", "logs/steps.txt", "run.tar.gz.00"]
    assert all((out / name).stat().st_size <= 2**20 for name in sent)
    joined = tmp_path / "joined"
    joined.mkdir()
    for name in ("run", "executed"):
        pieces = b"".join((out / p).read_bytes() for p in sent if p.startswith(name))
        subprocess.run(["tar", "-xz", "-C", str(joined)], input=pieces, check=True)
    assert (joined / "_build" / "executed" / "page.ipynb").read_bytes() == pages
    assert (joined / "data" / "results" / "R1" / "manifest.json").is_file()
    assert (joined / "logs" / "sanitize-vgg.log").read_text() == "sanitize-vgg.log"
