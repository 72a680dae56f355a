"""MTCNN's trained O-Net and P-Net through edgeport, judged as the face detector uses them (issue #55).

A real trained network, converted as a user would: facenet-pytorch's MTCNN weights (``make
setup-bench``; ``benchmarks/mtcnn_models.py``, as facenet-pytorch writes them: edgeport makes O-Net's ceil-mode pools exact), real photos
shipped offline (Ultralytics' wheel: ``zidane.jpg``, ``bus.jpg``; scikit-image's data). The faces
are MTCNN's own, found in PyTorch (facenet-pytorch's ``MTCNN.detect``). Each net runs on what it
runs on in the detector:

- O-Net on 48 x 48 crops: around each face, shifted and scaled as the earlier stages' boxes are,
  and crops of the photos' other parts;
- P-Net on 96 x 96 tiles of the photos scaled as MTCNN's pyramid scales them.

``--calib`` gets crops (tiles) of some photos, ``--val`` those of the others, so every file is
judged on images it was not calibrated on. For every quantised file ``convert`` writes (pure and
repaired), on the held-out crops (tiles), against PyTorch:

- a face PyTorch finds (probability >= MTCNN's threshold: O-Net 0.7, P-Net 0.6) moved: its box's
  IoU with PyTorch's, against the IoU that changing PyTorch's own box outputs by one 8-bit step
  (of their range on these images) can move it to, each side the worse way;
- a face added: the file's probability >= the threshold where PyTorch's is below it by more than
  one step (1/255), and a face lost, the other way round.

A file edgeport passes must neither move nor add a face (``faithful``); the check is that no file
``convert`` passes is unfaithful (a pure file passes with its rows; a repaired file where it stands
in for its pure file: ``Report.stand_in_refusal``). Prints a table and the JSON, and saves the JSON.
Runs offline, after ``make setup-bench`` (facenet-pytorch and scikit-image).

    .venv/bin/python benchmarks/mtcnn_bench.py [--nets onet pnet] [--boards default tflite-1.13]
        [--out benchmarks/results/mtcnn_bench.json] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CALIB_PHOTOS = ("zidane", "bus", "coffee", "chelsea")  # calibrated on
JUDGED_PHOTOS = ("astronaut", "camera", "rocket", "motorcycle_left")  # judged on: never calibrated on
THRESHOLD = {"onet": 0.7, "pnet": 0.6}  # MTCNN's (facenet-pytorch's defaults)
SIZE = {"onet": 48, "pnet": 96}
ARCH = {"onet": "mtcnn_models:ONet", "pnet": "mtcnn_models:PNet"}
PROB_STEP = 1 / 255  # one 8-bit step of a probability


def photos() -> dict[str, np.ndarray]:
    """name -> RGB uint8 (H, W, 3): Ultralytics' two photos and scikit-image's colour and grey ones."""
    import skimage.data
    import ultralytics
    from PIL import Image

    assets = Path(ultralytics.__file__).parent / "assets"
    out = {name: np.asarray(Image.open(assets / f"{name}.jpg").convert("RGB")) for name in ("zidane", "bus")}
    data = Path(skimage.data.__file__).parent
    for name in ("astronaut", "camera", "coffee", "chelsea", "rocket", "motorcycle_left"):
        path = next(data.glob(f"{name}.*"))
        out[name] = np.asarray(Image.open(path).convert("RGB"))
    return out


def reference_faces(images: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """name -> MTCNN's faces in PyTorch (K, 4) x1 y1 x2 y2, probability >= 0.9."""
    import torch
    from facenet_pytorch import MTCNN

    detector = MTCNN(keep_all=True, device="cpu")
    faces = {}
    with torch.no_grad():
        for name, img in images.items():
            boxes, probs = detector.detect(img)
            keep = [] if boxes is None else [b for b, p in zip(boxes, probs) if p is not None and p >= 0.9]
            faces[name] = np.asarray(keep, np.float64).reshape(-1, 4)
    return faces


def _resize(patch: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(patch).resize((size, size), Image.BILINEAR))


def _crop(img: np.ndarray, box) -> np.ndarray:
    """``box`` (x1 y1 x2 y2, may leave the photo) as MTCNN crops it: outside the photo is black."""
    x1, y1, x2, y2 = (int(round(v)) for v in box)
    out = np.zeros((max(y2 - y1, 1), max(x2 - x1, 1), 3), np.uint8)
    sx1, sy1, sx2, sy2 = max(x1, 0), max(y1, 0), min(x2, img.shape[1]), min(y2, img.shape[0])
    if sx2 > sx1 and sy2 > sy1:
        out[sy1 - y1:sy2 - y1, sx1 - x1:sx2 - x1] = img[sy1:sy2, sx1:sx2]
    return out


def onet_crops(images, faces, names, per_face: int, others: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """48 x 48 crops (N, 48, 48, 3) uint8 and their boxes in the photo (N, 4): around each face, made
    square as MTCNN makes its boxes square, shifted by up to a fifth and scaled by 0.8 to 1.25 (the
    first exact); then ``others`` of the photos' other parts."""
    crops, boxes = [], []
    for name in names:
        for face in faces[name]:
            cx, cy = (face[0] + face[2]) / 2, (face[1] + face[3]) / 2
            side = max(face[2] - face[0], face[3] - face[1])
            for k in range(per_face):
                s = side * (1.0 if k == 0 else rng.uniform(0.8, 1.25))
                dx, dy = (0.0, 0.0) if k == 0 else rng.uniform(-0.2, 0.2, 2) * side
                box = (cx + dx - s / 2, cy + dy - s / 2, cx + dx + s / 2, cy + dy + s / 2)
                crops.append(_resize(_crop(images[name], box), 48))
                boxes.append(box)
    for k in range(others):
        img = images[names[k % len(names)]]
        s = rng.uniform(0.1, 0.4) * min(img.shape[:2])
        x, y = rng.uniform(0, img.shape[1] - s), rng.uniform(0, img.shape[0] - s)
        crops.append(_resize(_crop(img, (x, y, x + s, y + s)), 48))
        boxes.append((x, y, x + s, y + s))
    return np.stack(crops), np.asarray(boxes, np.float64)


def pnet_tiles(images, faces, names, count: int, rng) -> np.ndarray:
    """``count`` 96 x 96 tiles (N, 96, 96, 3) uint8 of the photos scaled as MTCNN's pyramid scales them
    (a face 12 to 24 px), centred on a face where the photo has one, else anywhere."""
    from PIL import Image

    tiles = []
    for k in range(count):
        name = names[k % len(names)]
        img, found = images[name], faces[name]
        if len(found):
            face = found[rng.integers(len(found))]
            scale = rng.uniform(12, 24) / max(face[2] - face[0], face[3] - face[1])
            cx, cy = (face[0] + face[2]) / 2 * scale, (face[1] + face[3]) / 2 * scale
        else:
            scale = rng.uniform(0.1, 0.3)
            cx = cy = None
        h, w = max(int(img.shape[0] * scale), 96), max(int(img.shape[1] * scale), 96)
        small = np.asarray(Image.fromarray(img).resize((w, h), Image.BILINEAR))
        if cx is None:
            cx, cy = rng.uniform(48, w - 48), rng.uniform(48, h - 48)
        x = int(np.clip(cx + rng.uniform(-30, 30) - 48, 0, w - 96))
        y = int(np.clip(cy + rng.uniform(-30, 30) - 48, 0, h - 96))
        tiles.append(small[y:y + 96, x:x + 96])
    return np.stack(tiles)


def write_images(folder: Path, images: np.ndarray) -> None:
    from PIL import Image

    folder.mkdir(parents=True)
    for i, img in enumerate(images):
        Image.fromarray(img).save(folder / f"{i:03d}.png")


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ix = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    iy = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    inter = ix * iy
    area = lambda r: (r[..., 2] - r[..., 0]) * (r[..., 3] - r[..., 1])  # noqa: E731
    return inter / np.maximum(area(a) + area(b) - inter, 1e-9)


def _one_step_iou(boxes: np.ndarray, sides: np.ndarray, step: float) -> np.ndarray:
    """The lowest IoU with ``boxes`` that moving each side by one step of the offsets (``step`` x the
    side it scales) reaches: every side in, or every side out."""
    d = (step * sides)[:, None] * np.array([1, 1, -1, -1])
    return np.minimum(_iou(boxes, boxes + d), _iou(boxes, boxes - d))


def faces_of(net: str, outputs: list[np.ndarray], windows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(probabilities, boxes, sides) of every candidate: O-Net one a crop (``windows``: its box in the
    photo), P-Net one a cell of each tile (a 12 px window every 2 px, MTCNN's)."""
    if net == "onet":
        offsets, _, prob = outputs
        sides = np.stack([windows[:, 2] - windows[:, 0], windows[:, 3] - windows[:, 1]], 1)
        boxes = windows + offsets * np.concatenate([sides, sides], 1)
        return prob[:, 1], boxes, sides[:, 0]
    offsets, prob = outputs  # (N, 4, H, W), (N, 2, H, W)
    n, _, h, w = prob.shape
    ys, xs = np.meshgrid(np.arange(h) * 2.0, np.arange(w) * 2.0, indexing="ij")
    cells = np.stack([xs, ys, xs + 12, ys + 12], -1)[None].repeat(n, 0)  # (N, H, W, 4)
    boxes = cells + offsets.transpose(0, 2, 3, 1) * 12
    return prob[:, 1].reshape(-1), boxes.reshape(-1, 4), np.full(n * h * w, 12.0)


def judge(net: str, ref: list[np.ndarray], got: list[np.ndarray], windows: np.ndarray, step: float) -> dict:
    """Faces moved, added and lost by a file's outputs ``got`` against PyTorch's ``ref``."""
    thr = THRESHOLD[net]
    p_ref, b_ref, sides = faces_of(net, ref, windows)
    p_got, b_got, _ = faces_of(net, got, windows)
    found = p_ref >= thr
    both = found & (p_got >= thr)
    iou = _iou(b_ref[both], b_got[both])
    bound = _one_step_iou(b_ref[both], sides[both], step)
    moved = iou < bound
    added = int(np.sum((p_got >= thr) & (p_ref < thr - PROB_STEP)))
    lost = int(np.sum((p_got < thr) & (p_ref >= thr + PROB_STEP)))
    worst = int(np.argmin(iou - bound)) if len(iou) else None
    return {"faces": int(found.sum()), "moved": int(moved.sum()), "added": added, "lost": lost,
            "worst_iou": round(float(iou[worst]), 4) if worst is not None else None,
            "its_bound": round(float(bound[worst]), 4) if worst is not None else None,
            "max_prob_error": round(float(np.max(np.abs(p_got - p_ref))), 4),
            "faithful": not moved.any() and added == 0}


def convert(net: str, board: str, calib: Path, val: Path, work: Path) -> tuple[dict | None, Path, float, str]:
    import mtcnn_models
    import torch

    ckpt = work / f"{net}.pt"
    if not ckpt.exists():
        torch.save({"model": getattr(mtcnn_models, ARCH[net].split(":")[1])().state_dict()}, ckpt)
    out = work / f"{net}-{board}"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "edgeport.cli", "convert", str(ckpt), "--arch", ARCH[net], "--imgsz", str(SIZE[net]),
                           "--calib", str(calib), "--val", str(val), "--head", "raw", "--board", board, "--out", str(out)],
                          cwd=HERE, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    report = out / "report.json"
    data = json.loads(report.read_text()) if report.is_file() else None
    if data is not None:
        from edgeport.validate.report.render import verdict
        from edgeport.validate.report.schema import Report

        said = verdict(Report.from_dict(data))
    else:
        said = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    return data, out, seconds, f"exit {proc.returncode}: {said}"


def run_file(path: Path, images: np.ndarray, shapes, plans) -> list[np.ndarray]:
    from edgeport.validate.parity.tensors import denormalise
    from edgeport.validate.parity.tflite_runner import TFLiteRunner

    outputs = TFLiteRunner(path, shapes).run(images).outputs
    return denormalise(outputs, plans) if plans else outputs


def measure(net: str, board: str, sets: dict, work: Path) -> list[dict]:
    import mtcnn_models
    import torch

    report, out, seconds, said = convert(net, board, sets["calib_dir"], sets["val_dir"], work)
    print(f"{net} {board}: {said} ({seconds:.0f} s)", flush=True)
    rows = []
    if report is None:
        return [{"net": net, "board": board, "file": "(verdict)", "convert": said}]
    x = sets["val"].transpose(0, 3, 1, 2).astype(np.float32) / 255
    model = getattr(mtcnn_models, ARCH[net].split(":")[1])().eval()
    with torch.no_grad():
        ref = [t.numpy() for t in model(torch.from_numpy(x))]
    shapes = [tuple(r.shape) for r in ref]
    shapes = [(1, *s[1:]) for s in shapes]
    step = float(ref[0].max() - ref[0].min()) / 255  # one 8-bit step of the box offsets' range
    ship = (report.get("ship") or {}).get("file")
    from edgeport.validate.report.schema import Report

    typed = Report.from_dict(report)
    # edgeport's word on each quantised file: the pure file passes with its rows; a repaired one where it stands in
    passed = {v: all(r["passed"] for r in report["results"] if r["variant"] == v) for v in {r["variant"] for r in report["results"]}}
    passed.update({v: passed[v] and v.split("-")[0] in typed.repaired for v in passed if v.endswith("-repaired")})
    refusal = {v: typed.stand_in_refusal(v.split("-")[0]) for v in passed if v.endswith("-repaired")}
    for variant in sorted(passed):
        if variant == "float32" or not variant.startswith(("int8", "uint8")):
            continue
        path = out / f"model_{variant.replace('-', '_')}.tflite"
        if not path.is_file():
            continue
        plans = (report.get("repairs") or {}).get(variant.split("-")[0], {}).get("int8_normalised") if variant.endswith("repaired") \
            else report.get("int8_normalised")
        got = run_file(path, x, shapes, plans)
        row = {"net": net, "board": board, "file": path.name, "passes": passed[variant], "shipped": ship == path.name,
               **({"stands_in": refusal[variant] or "yes"} if variant in refusal else {}),
               **judge(net, ref, got, sets["val_windows"], step)}
        rows.append(row)
    rows.append({"net": net, "board": board, "file": "(verdict)", "convert": said, "ship": ship, "seconds": round(seconds, 1)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", nargs="+", default=["onet", "pnet"], choices=["onet", "pnet"])
    parser.add_argument("--boards", nargs="+", default=["default", "tflite-1.13"])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "mtcnn_bench.json")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="edgeport-mtcnn-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rng = np.random.default_rng(0)
    images = photos()
    faces = reference_faces(images)
    print("faces found in PyTorch:", {k: len(v) for k, v in faces.items()}, flush=True)
    rows = []
    for net in args.nets:
        if net == "onet":
            calib, _ = onet_crops(images, faces, CALIB_PHOTOS, 6, 8, rng)
            val, windows = onet_crops(images, faces, JUDGED_PHOTOS, 12, 8, rng)
        else:
            calib = pnet_tiles(images, faces, CALIB_PHOTOS, 32, rng)
            val = pnet_tiles(images, faces, JUDGED_PHOTOS, 32, rng)
            windows = None
        sets = {"calib_dir": work / f"{net}-calib", "val_dir": work / f"{net}-val", "val": val, "val_windows": windows}
        write_images(sets["calib_dir"], calib)
        write_images(sets["val_dir"], val)
        for board in args.boards:
            rows += measure(net, board, sets, work)
    unfaithful_passed = [r for r in rows if r.get("passes") and not r.get("faithful", True)]
    # a convert that ended in bad input or an internal error measured nothing: no target is met by it
    broken = [r for r in rows if r["file"] == "(verdict)" and not str(r.get("convert", "")).startswith(("exit 0", "exit 1"))]
    print(f"{'net':5} {'board':12} {'file':32} {'passes':6} {'faces':>5} {'moved':>5} {'added':>5} {'lost':>4} "
          f"{'worst IoU':>9} {'bound':>6} {'max dp':>7}")
    for r in rows:
        if r["file"] == "(verdict)" or "faces" not in r:
            print(f"{r['net']:5} {r['board']:12} {r.get('convert', '')}")
            continue
        print(f"{r['net']:5} {r['board']:12} {r['file']:32} {str(r['passes']):6} {r['faces']:5} {r['moved']:5} {r['added']:5} "
              f"{r['lost']:4} {r['worst_iou'] if r['worst_iou'] is not None else '-':>9} {r['its_bound'] if r['its_bound'] is not None else '-':>6} "
              f"{r['max_prob_error']:7}")
    result = {"benchmark": "mtcnn_bench", "python": platform.python_version(), "rows": rows,
              "calibrated_on": list(CALIB_PHOTOS), "judged_on": list(JUDGED_PHOTOS),
              "target": "no file edgeport passes moves or adds a face", "met": not unfaithful_passed and not broken}
    print(json.dumps({"met": result["met"], "unfaithful_passed": [f"{r['net']}/{r['board']}/{r['file']}" for r in unfaithful_passed],
                      "broken": [f"{r['net']}/{r['board']}: {r['convert'][:120]}" for r in broken]}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
