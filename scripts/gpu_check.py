"""The trainer on a real GPU in a few minutes, with every figure in ``summary.json``.

Run by ``scripts/gpu_check.sh`` (which picks the Python) on a lent GPU machine that is bare: no
network, its own ``python3`` with torch, numpy, pillow, rich and matplotlib, no edgeport install.
Only the standard library is imported before the checks start, so a missing piece is a reason in
the summary, not a traceback:

- the checkout is made importable as ``edgeport`` (a link to it under OUT/.pkg, no pip);
- wheels brought by ``scripts/gpu_wheels.sh`` (in .gpu_wheels/) that fit this Python are
  unpacked under OUT/.site-cpXY.

Checks, one process each, timed: train (DDP + torch's SyncBatchNorm + accumulation 2, one epoch),
--resume to a second epoch, 2 ranks x batch 2 equal to 1 rank x batch 4 within 1e-9 relative
(``--deterministic --float64``; with one GPU the two ranks share it over gloo, as NCCL refuses two
ranks on one device), one ``--amp bf16`` epoch, one ``--amp fp16`` epoch (GPU only), the CPU convert
of the trained best.pt (where the converter stack is installed), and with 2+ GPUs the throughput on
all of them against one. ``--smoke`` runs the same steps on the CPU over gloo, tiny, for the test
suite (tests/train/test_gpu_check.py): a missing import shows there, not in GPU minutes.

Exit 0 when every check that ran passed, 1 when one failed, 2 when nothing could run.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / ".gpu_wheels"
MARKER = ".edgeport-gpu-check"  # this folder is the script's own: a rerun may write into it
MARKER_SCHEMA = "edgeport.gpu-check/1"  # the marker's JSON: its schema, and the SHA-256 of the summary it wrote
SUMMARY = "summary.json"
# what the checks import: the trainer's own stack (pycocotools is the one a bare machine lacks)
NEEDED = ("torch", "numpy", "PIL", "rich", "matplotlib", "pycocotools")
CONVERTER_STACK = ("onnx", "onnxruntime", "onnxslim", "onnx2tf", "ai_edge_litert")
# the equivalence runs in float64 (--float64): in float32, one activation that rounds to the
# other side of a ReLU's kink on one split and not the other sends its gradient elsewhere, and
# 8 steps at 160 px moved a bias by 37 % of its size (CPU and GPU alike); float64 measured
# 3e-13 on the CPU, so 1e-9 is rounding with room, and far below any logic error
EQ_TOLERANCE = 1e-9
SCALING_TARGET = 0.8
MODES = {
    # images, val images, size, batch per rank; equivalence data: images
    "gpu": {"n": 2048, "n_val": 64, "imgsz": 160, "batch": 32, "eq_n": 64, "device": "cuda"},
    "smoke": {"n": 32, "n_val": 4, "imgsz": 64, "batch": 4, "eq_n": 16, "device": "cpu"},
}


def importable_checkout(out: Path) -> dict[str, str]:
    """The environment for every step: the checkout as ``edgeport``, then the unpacked wheels."""
    pkg = out / ".pkg"
    pkg.mkdir(parents=True, exist_ok=True)
    link = pkg / "edgeport"
    if link.is_symlink() and link.resolve() != ROOT:
        link.unlink()
    if not link.exists():
        link.symlink_to(ROOT, target_is_directory=True)
    paths = [str(pkg)]
    wheels = [w for w in sorted(WHEELS.glob("*.whl")) if wheel_fits(w.name)] if WHEELS.is_dir() else []
    if wheels:
        site = out / f".site-cp{sys.version_info[0]}{sys.version_info[1]}"
        for wheel in wheels:
            stamp = site / f".{wheel.name}.unpacked"
            if not stamp.exists():
                with zipfile.ZipFile(wheel) as z:
                    z.extractall(site)
                stamp.touch()
        paths.append(str(site))
    old = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths + ([old] if old else [])), PYTHONUNBUFFERED="1")


def wheel_fits(name: str, version: tuple[int, int] = sys.version_info[:2]) -> bool:
    """Whether Python ``version`` can load the wheel ``name`` (CPython tags only: cpXY, abi3 from cpXY on, py3)."""
    py, abi = name[:-4].split("-")[-3:-1]
    ours = version[0] * 100 + version[1]
    for tag in py.split("."):
        if tag in ("py3", f"py{version[0]}{version[1]}"):
            return True
        if tag.startswith("cp") and tag[2:].isdigit():
            built_for = int(tag[2]) * 100 + int(tag[3:])
            if built_for == ours or (abi == "abi3" and built_for <= ours):
                return True
    return False


def missing_modules(env: dict[str, str], names) -> list[str]:
    """The modules of ``names`` this Python cannot find (with the checkout and the wheels on its path)."""
    code = "import importlib.util, sys; print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n) is None))"
    found = subprocess.run([sys.executable, "-c", code, *names], env=env, capture_output=True, text=True)
    if found.returncode != 0:  # a package that breaks on import of its parent (find_spec imports parents)
        said = found.stderr.strip().splitlines()[-1][:200] if found.stderr.strip() else f"exit {found.returncode}"
        return [f"{names[0]} and the rest unchecked ({said})"]
    return found.stdout.split()


class Steps:
    """Each step a process of ``edgeport``, its output appended to the log, its time recorded."""

    def __init__(self, out: Path, env: dict[str, str], deadline: float):
        self.env, self.deadline = env, deadline
        self.log = out / "gpu_check.log"
        self.log.write_text("")
        self.times: dict[str, dict] = {}

    def run(self, name: str, *args: str, env: dict[str, str] | None = None) -> bool:
        if self.deadline - time.monotonic() < 5:
            self.times[name] = {"seconds": 0.0, "exit": "skipped: the time budget was spent"}
            print(f"  {name}: skipped, the time budget was spent", flush=True)
            return False
        t0 = time.monotonic()
        with open(self.log, "a") as log:
            log.write(f"\n$ edgeport {' '.join(args)}\n")
            log.flush()
            try:
                rc = subprocess.run([sys.executable, "-m", "edgeport.cli", *args], env=env or self.env, stdout=log,
                                    stderr=subprocess.STDOUT, timeout=max(1.0, self.deadline - time.monotonic())).returncode
            except subprocess.TimeoutExpired:
                rc = "timed out"
        self.times[name] = {"seconds": round(time.monotonic() - t0, 1), "exit": rc}
        print(f"  {name}: exit {rc} in {self.times[name]['seconds']} s", flush=True)
        return rc == 0


def metrics(run: Path) -> list[dict]:
    with open(run / "metrics.csv") as f:
        return list(csv.DictReader(f))


def max_rel_diff(a: Path, b: Path) -> float:
    import torch

    wa = torch.load(a, map_location="cpu", weights_only=True)["model"]
    wb = torch.load(b, map_location="cpu", weights_only=True)["model"]
    if list(wa) != list(wb):
        return float("inf")
    return max(float((wa[k].double() - wb[k].double()).abs().max() / wb[k].double().abs().max().clamp_min(1e-12))
               for k in wb if wb[k].is_floating_point())


def run_checks(mode: str, out: Path, budget_s: float, convert: bool) -> dict:
    cfg = MODES[mode]
    summary: dict = {"mode": mode, "python": platform.python_version(), "checks": {}}
    env = importable_checkout(out)
    missing = missing_modules(env, ("edgeport.cli", *NEEDED))
    if missing:
        hint = " (run scripts/gpu_wheels.sh on a machine with the registry and bring .gpu_wheels/ along)" if "pycocotools" in missing else ""
        return {**summary, "ran": False, "reason": f"not importable here: {', '.join(missing)}{hint}"}
    import torch

    ngpu = torch.cuda.device_count()
    summary.update(torch=torch.__version__, gpus=ngpu)
    if mode == "gpu":
        if ngpu < 1:
            return {**summary, "ran": False, "reason": "no CUDA device visible (use --smoke to check the script on the CPU)"}
        summary["device"] = torch.cuda.get_device_name(0)
    world = max(ngpu, 1) if mode == "gpu" else 2
    backend = "nccl" if mode == "gpu" else "gloo"
    steps = Steps(out, env, time.monotonic() + budget_s)
    t0 = time.monotonic()

    data, eq_data = out / f"data-{mode}", out / f"data-{mode}-eq"  # the two modes' images differ in size
    for name, path, n, n_val in (("data", data, cfg["n"], cfg["n_val"]), ("data, equivalence", eq_data, cfg["eq_n"], 2)):
        if not (path / "images").is_dir() and not steps.run(name, "data", "synth", "--out", str(path), "--n", str(n),
                                                            "--n-val", str(n_val), "--imgsz", str(cfg["imgsz"])):
            return {**summary, "ran": False, "reason": f"`edgeport data synth` failed: see {steps.log}", "steps": steps.times}

    common = ("--imgsz", str(cfg["imgsz"]), "--device", cfg["device"], "--syncBN", "--eval-every", "1000", "--optimizer", "sgd",
              "--lr", "0.02", "--force")
    checks = summary["checks"]

    # 1. DDP + SyncBN + accumulation, then resume for a second epoch
    ddp = out / "ddp"
    trained = steps.run("train", "train", "--data", str(data), "--out", str(ddp), *common, "--world-size", str(world),
                   "--backend", backend, "--batch-size", str(cfg["batch"]), "--accumulate", "2", "--epochs", "1")
    if trained:
        row = metrics(ddp)[0]
        checks["train"] = {"passed": True, "world_size": world, "backend": backend, "images_per_s": float(row["images_per_s"]),
                           "images_per_s_per_gpu": float(row["images_per_s"]) / world if mode == "gpu" else None,
                           "loss": float(row["loss"]), "optimizer_steps": int(row["optimizer_steps"]),
                           "allreduce_rounds_per_step": int(row["allreduce_rounds"]) / max(int(row["optimizer_steps"]), 1)}
        resumed = steps.run("resume", "train", "--data", str(data), "--resume", str(ddp / "last.pt"), "--device", cfg["device"],
                       "--world-size", str(world), "--backend", backend, "--epochs", "2")
        epoch = torch.load(ddp / "last.pt", map_location="cpu", weights_only=True)["epoch"] if resumed else None
        ran_on = json.loads((ddp / "args.json").read_text())
        checks["resume"] = {"passed": epoch == 2 and ran_on["device"] == cfg["device"], "resumed_to_epoch": epoch,
                            "device": ran_on["device"], "backend": ran_on["backend"]}
    else:
        checks["train"] = {"passed": False, "reason": f"training failed: see {steps.log}"}
        checks["resume"] = {"skipped": "training failed"}

    # 2. 2 ranks x batch 2 == 1 rank x batch 4, accumulation 2, deterministic
    eq_backend = "nccl" if mode == "gpu" and ngpu >= 2 else "gloo"
    eq = ("--data", str(eq_data), "--deterministic", "--float64", *common, "--epochs", "1", "--accumulate", "2")
    if (steps.run("equivalence, 2 ranks", "train", *eq, "--out", str(out / "eq2"), "--world-size", "2", "--backend", eq_backend,
                  "--batch-size", "2")
            and steps.run("equivalence, 1 rank", "train", *eq, "--out", str(out / "eq1"), "--world-size", "1", "--backend", eq_backend,
                          "--batch-size", "4")):
        rel = max_rel_diff(out / "eq2" / "last.pt", out / "eq1" / "last.pt")
        checks["equivalence"] = {"passed": rel <= EQ_TOLERANCE, "max_rel_diff": rel, "tolerance": EQ_TOLERANCE, "dtype": "float64",
                                 "backend": eq_backend,
                                 "ranks_per_gpu": (2 if ngpu == 1 else 1) if mode == "gpu" else None}
    else:
        checks["equivalence"] = {"passed": False, "reason": f"a training run failed: see {steps.log}"}

    # 3. one bf16 autocast epoch
    bf16 = out / "bf16"
    if steps.run("bf16", "train", "--data", str(data), "--out", str(bf16), *common, "--world-size", str(world), "--backend", backend,
                 "--batch-size", str(cfg["batch"]), "--epochs", "1", "--amp", "bf16"):
        row = metrics(bf16)[0]
        loss = float(row["loss"])
        checks["bf16"] = {"passed": loss == loss and abs(loss) != float("inf"), "loss": loss, "images_per_s": float(row["images_per_s"])}
    else:
        checks["bf16"] = {"passed": False, "reason": f"the bf16 epoch failed: see {steps.log}"}

    # 3b. one fp16 epoch with the gradient scaler (CUDA only)
    if mode == "gpu":
        fp16 = out / "fp16"
        if steps.run("fp16", "train", "--data", str(data), "--out", str(fp16), *common, "--world-size", str(world), "--backend", backend,
                     "--batch-size", str(cfg["batch"]), "--accumulate", "2", "--epochs", "1", "--amp", "fp16"):
            row = metrics(fp16)[0]
            loss = float(row["loss"])
            weights = torch.load(fp16 / "last.pt", map_location="cpu", weights_only=True)["model"]
            kept = all(v.dtype == torch.float32 for v in weights.values() if v.is_floating_point())
            checks["fp16"] = {"passed": loss == loss and abs(loss) != float("inf") and kept, "loss": loss,
                              "weights_float32": kept, "images_per_s": float(row["images_per_s"])}
        else:
            checks["fp16"] = {"passed": False, "reason": f"the fp16 epoch failed: see {steps.log}"}
    else:
        checks["fp16"] = {"skipped": "--amp fp16 needs CUDA"}

    # 4. throughput on every GPU against one
    if mode == "gpu" and ngpu >= 2 and trained:
        if steps.run("one GPU", "train", "--data", str(data), "--out", str(out / "one"), *common, "--world-size", "1",
                     "--batch-size", str(cfg["batch"]), "--accumulate", "2", "--epochs", "1"):
            one = float(metrics(out / "one")[0]["images_per_s"])
            scaling = checks["train"]["images_per_s"] / (ngpu * one)
            checks["throughput"] = {"passed": scaling >= SCALING_TARGET, "one_gpu_images_per_s": one, "scaling": scaling,
                                    "target": SCALING_TARGET}
        else:
            checks["throughput"] = {"passed": False, "reason": f"the one-GPU run failed: see {steps.log}"}
    else:
        checks["throughput"] = {"skipped": "needs 2 or more GPUs" if mode == "gpu" else "not measured on the CPU"}

    # 5. the trained checkpoint converts on the CPU, where the converter stack is installed
    absent = missing_modules(env, CONVERTER_STACK)
    if not convert:
        checks["convert_cpu"] = {"skipped": "--no-convert"}
    elif absent:
        checks["convert_cpu"] = {"skipped": f"the converter stack is not installed here ({', '.join(absent)})"}
    elif not (ddp / "best.pt").is_file():
        checks["convert_cpu"] = {"skipped": "no trained checkpoint"}
    else:
        conv = out / "conv"
        steps.run("convert on the CPU", "convert", str(ddp / "best.pt"), "--imgsz", str(cfg["imgsz"]), "--out", str(conv), "--force",
                  env={**env, "CUDA_VISIBLE_DEVICES": ""})
        report = conv / "report.json"
        if report.is_file():
            # a checkpoint trained for two epochs: float32 must match PyTorch; its int8 is reported
            # (an untrained head's scores sit under int8's step, as docs/limits.md says)
            rows = json.loads(report.read_text())["results"]
            verdict = {v: all(r["passed"] for r in rows if r["variant"] == v) for v in sorted({r["variant"] for r in rows})}
            checks["convert_cpu"] = {"passed": verdict.get("float32", False), "rows_passed": verdict, "report": str(report)}
        else:
            checks["convert_cpu"] = {"passed": False, "reason": f"no report: see {steps.log}"}

    summary.update(ran=True, seconds=round(time.monotonic() - t0, 1), steps=steps.times)
    summary["passed"] = all(c.get("passed", True) for c in checks.values())
    return summary


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_marker(out: Path) -> dict | None:
    """The folder's marker, read without following a link; None unless it is gpu_check's JSON."""
    try:
        fd = os.open(out / MARKER, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            said = json.loads(f.read(1 << 20) or b"null")
    except (OSError, ValueError):
        return None
    return said if isinstance(said, dict) and said.get("schema") == MARKER_SCHEMA else None


def refusal(out: Path) -> str | None:
    """Why OUT may not be written, or None: it is new, empty, or a folder gpu_check made -- its
    marker is gpu_check's JSON (an empty file is not), no file it writes is a link, and the
    summary there is the one the marker says it wrote. A user's summary.json is never overwritten."""
    if not out.exists():
        return None
    if not out.is_dir():
        return f"{out} exists and is not a gpu_check folder (a file)"
    if not any(out.iterdir()):
        return None
    said = _read_marker(out)
    if said is None:
        return f"{out} exists and is not a gpu_check folder (no {MARKER} of gpu_check's own: an empty one is not)"
    links = [n for n in (MARKER, SUMMARY, "gpu_check.log") if (out / n).is_symlink()]
    if links:
        return f"{out} exists and is not a gpu_check folder ({', '.join(links)} a link)"
    summary = out / SUMMARY
    if summary.exists() and (not summary.is_file() or said.get(SUMMARY) != _sha256(summary)):
        return f"{out} exists and is not a gpu_check folder (its {SUMMARY} is not the one gpu_check wrote)"
    return None


def _write_new(path: Path, text: str) -> None:
    """``path`` replaced by a new file (O_EXCL | O_NOFOLLOW, then a rename): never written through a link."""
    import secrets

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")  # a name no one else has
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:  # (created above: a file already at that name fails the open, and is not ours to remove)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", type=Path, default=ROOT / "runs" / "gpu_check", help="output folder (default runs/gpu_check)")
    p.add_argument("--smoke", action="store_true", help="the same steps on the CPU, tiny: checks the script and its imports")
    p.add_argument("--no-convert", dest="convert", action="store_false", help="skip the CPU convert step")
    p.add_argument("--budget", type=float, default=300.0, help="seconds for all steps together (default 300)")
    args = p.parse_args(argv)
    out = args.out.resolve()
    why = refusal(out)
    if why is not None:
        # it writes summary.json, gpu_check.log and run folders there: never into a folder of the user's
        print(f"gpu_check: {why}; give a new or empty OUT_DIR", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    marker = {"schema": MARKER_SCHEMA, **({SUMMARY: _sha256(out / SUMMARY)} if (out / SUMMARY).is_file() else {})}
    _write_new(out / MARKER, json.dumps(marker) + "\n")
    summary = run_checks("smoke" if args.smoke else "gpu", out, args.budget, args.convert)
    _write_new(out / SUMMARY, json.dumps(summary, indent=2) + "\n")
    _write_new(out / MARKER, json.dumps({"schema": MARKER_SCHEMA, SUMMARY: _sha256(out / SUMMARY)}) + "\n")
    print(json.dumps(summary, indent=2))
    if not summary.get("ran"):
        print(f"gpu_check: {summary['reason']}", file=sys.stderr)
        return 2
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
