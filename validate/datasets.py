"""Detection datasets: the YOLO folder layout and COCO JSON, with loud label checking.

YOLO layout: ``DIR/images/{train,val}/*`` and ``DIR/labels/{train,val}/<stem>.txt`` with one
``class cx cy w h`` line per box, normalised to [0, 1]. COCO: ``DIR/annotations/{split}.json``
(``images``, ``annotations`` with ``bbox`` = x, y, w, h in pixels, ``categories``) next to
``DIR/images/{split}/``. Bad labels are errors that name the file and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeport.cliargs import real_number, whole_number
from edgeport.errors import BadInputError
from edgeport.jsonfile import Refused, read_json
from edgeport.models.preprocess import image_size, list_images, load_image
from edgeport.text import shown
from edgeport.userfiles import read_bounded

# A label file: one line of about 40 bytes a box; the densest published sets (crowds, shop
# shelves) have a few thousand boxes an image, well under a megabyte.
MAX_LABEL_BYTES = 16 << 20
# A COCO annotations file: COCO's own instances_train2017.json is about 450 MB, with room to
# double it; JSON parses into several times its size in memory, so the bound is also a memory one.
MAX_COCO_BYTES = 1 << 30


class DataError(BadInputError):
    """A dataset folder or label file is missing or malformed."""


@dataclass(frozen=True)
class Sample:
    image: Path
    boxes: np.ndarray  # (K, 4) xyxy in original pixels
    classes: np.ndarray  # (K,) int64
    width: int
    height: int


def read_image(read, path: Path):
    """``read(path)`` of an image (``image_size``, ``load_image``): one that is not a plain file, not an
    image or too large to decode is a ``DataError`` that names it."""
    try:
        return read(path)
    except (OSError, ValueError) as exc:
        raise DataError(f"image {str(path)!r} is unreadable ({exc}); remove or replace it") from None


def _stays_in(root: Path, path: Path) -> bool:
    """Whether ``path``, its links followed, lies inside ``root`` (its links followed too)."""
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):  # outside; or a link loop (RuntimeError before Python 3.13)
        return False
    return True


def _read_in(root: Path, path: Path, what: str, read):
    """``read(path)`` for a label or annotations file, which must lie inside the dataset ``root``:
    a link out of it is never followed (a dataset is shared, and the file it points at may be
    anyone's). Whatever the file is or holds, a ``DataError`` that names it and quotes at most a
    short, escaped excerpt (``text.shown``)."""
    if not _stays_in(root, path):
        raise DataError(f"{path}: the {what} is a link that leads out of the dataset {str(root)!r}; labels and annotations "
                        f"must lie inside the --data folder (images may be links): put the file itself there")
    try:
        return read(path)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not a text {what} (byte {exc.start} is not UTF-8); replace it") from None
    except Refused as exc:
        raise DataError(f"{path}: the {what} {exc}; fix or replace it") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None


def parse_yolo_label(path: Path, width: int, height: int, num_classes: int, *, root: Path) -> tuple[np.ndarray, np.ndarray]:
    """The boxes (xyxy pixels) and classes of the label file ``path`` of the dataset ``root``; an
    error names the file and line, and quotes at most a short, escaped excerpt of the line."""
    boxes, classes = [], []
    text = _read_in(root, path, "label file", lambda p: read_bounded(p, MAX_LABEL_BYTES).decode("utf-8"))
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        where = f"{path}:{lineno}"
        if len(fields) != 5:
            raise DataError(f"{where}: expected 'class cx cy w h' (5 fields), got {len(fields)}: {shown(line.strip())}")
        try:
            cls = int(fields[0])
            cx, cy, w, h = (float(v) for v in fields[1:])
        except ValueError as exc:
            raise DataError(f"{where}: not numbers: {shown(line.strip())}") from exc
        if not 0 <= cls < num_classes:
            raise DataError(f"{where}: class {cls} out of range 0..{num_classes - 1}; check --num-classes")
        if not all(0.0 <= v <= 1.0 for v in (cx, cy, w, h)) or w <= 0 or h <= 0:
            raise DataError(f"{where}: box {cx} {cy} {w} {h} is not normalised to (0, 1]")
        boxes.append([(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height])
        classes.append(cls)
    b = np.clip(np.asarray(boxes, np.float32).reshape(-1, 4), 0, [width, height, width, height])
    return b, np.asarray(classes, np.int64)


def load_yolo_split(root: Path, split: str, num_classes: int, first: int | None = None) -> list[Sample]:
    img_dir, lbl_dir = root / "images" / split, root / "labels" / split
    if not img_dir.is_dir():
        raise DataError(f"{str(img_dir)!r} does not exist; expected DIR/images/{{train,val}} (YOLO layout)")
    images = list_images(img_dir)
    if not images:
        raise DataError(f"{str(img_dir)!r} holds no images")
    samples = []
    for image in images[:first]:
        w, h = read_image(image_size, image)
        label = lbl_dir / f"{image.stem}.txt"
        if label.exists() or label.is_symlink():  # a broken link is an error, not an image without objects
            boxes, classes = parse_yolo_label(label, w, h, num_classes, root=root)
        else:
            boxes, classes = np.zeros((0, 4), np.float32), np.zeros(0, np.int64)  # no objects
        samples.append(Sample(image, boxes, classes, w, h))
    stems = {p.stem for p in images}
    orphans = sorted(p.name for p in lbl_dir.glob("*.txt") if p.stem not in stems) if lbl_dir.is_dir() else []
    if orphans:
        raise DataError(f"{lbl_dir}: labels without an image: {', '.join(orphans[:3])}; missing images?")
    return samples


# how far a COCO box may reach past the image's edge before it is an error, not rounding:
# this many pixels, or this fraction of the image's side, whichever is more
EDGE_PX, EDGE_FRACTION = 2.0, 0.01


def _inside(root: Path, name: str) -> Path | None:
    """``root/name`` when ``name`` is a relative path below ``root`` (no '..'), else None. A name
    from a file never leaves the folder; the image there may be a link that does (DVC and git-annex
    datasets are links into a cache), read as a YOLO image is: a plain file, only as an image."""
    rel = Path(name)
    if not name or rel.is_absolute() or ".." in rel.parts or "\x00" in name:
        return None
    return root / rel


def _coco_box(bbox, width: int, height: int) -> list[float] | None:
    """xyxy in pixels, clipped to the image; None when the box is not a real one inside it."""
    x, y, w, h = (float(v) for v in bbox)
    # the bounds first: in the float32 boxes are kept in, 1e308 would become inf
    if w <= 0 or h <= 0:
        return None
    slack_x, slack_y = max(EDGE_PX, EDGE_FRACTION * width), max(EDGE_PX, EDGE_FRACTION * height)
    if x < -slack_x or y < -slack_y or x + w > width + slack_x or y + h > height + slack_y:
        return None
    return [max(x, 0.0), max(y, 0.0), min(x + w, float(width)), min(y + h, float(height))]


def load_coco_split(root: Path, split: str, num_classes: int, first: int | None = None) -> list[Sample]:
    ann = root / "annotations" / f"{split}.json"
    data = _read_in(root, ann, "COCO JSON file", lambda path: read_json(path, MAX_COCO_BYTES))
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise DataError(f"{ann}: expected a COCO object with an 'images' list")
    categories = data.get("categories", [])
    if not isinstance(categories, list) or not all(isinstance(c, dict) and whole_number(c.get("id")) for c in categories):
        raise DataError(f"{ann}: 'categories' must be a list of objects with an integer 'id'")
    cat_ids = sorted({c["id"] for c in categories})
    if len(cat_ids) != len(categories):
        raise DataError(f"{ann}: two categories share an id")
    cat_index = {cid: i for i, cid in enumerate(cat_ids)}
    if len(cat_ids) > num_classes:
        raise DataError(f"{ann}: {len(cat_ids)} categories but --num-classes {num_classes}")
    images = data["images"]
    if not images:
        raise DataError(f"{ann}: the {split} split lists no images; add some")
    annotations = data.get("annotations", [])
    if not isinstance(annotations, list):
        raise DataError(f"{ann}: 'annotations' must be a list (of objects with image_id, category_id and bbox), "
                        f"got {type(annotations).__name__}")
    folder = root / "images" / split
    per_image: dict[int, list] = {}
    info: dict[int, tuple[Path, int, int]] = {}
    for i, img in enumerate(images):
        if not isinstance(img, dict) or not isinstance(img.get("file_name"), str) or not whole_number(img.get("id")):
            raise DataError(f"{ann}: images[{i}] needs an integer 'id' and a 'file_name'")
        if img["id"] in per_image:
            raise DataError(f"{ann}: images[{i}] repeats the id {shown(img['id'])}")
        per_image[img["id"]] = []
        if first is not None and i >= first:
            continue  # past the images asked for: its file is not read
        if not all(whole_number(img.get(k)) and img[k] > 0 for k in ("width", "height")):
            raise DataError(f"{ann}: images[{i}] ({shown(img['file_name'])}) needs positive integer 'width' and 'height'")
        path = _inside(folder, img["file_name"])
        if path is None:
            raise DataError(f"{ann}: images[{i}] file_name {shown(img['file_name'])} leaves {folder}; file names are relative "
                            f"to the split's image folder")
        if not path.is_file():
            raise DataError(f"{ann}: image {shown(img['file_name'])} (id {shown(img['id'])}) is missing from {folder}")
        width, height = read_image(image_size, path)
        if (width, height) != (img["width"], img["height"]):
            raise DataError(f"{ann}: images[{i}] ({shown(img['file_name'])}) declares {img['width']}x{img['height']} but the file "
                            f"is {width}x{height}; fix the annotation")
        info[img["id"]] = (path, width, height)
    for i, a in enumerate(annotations):
        bbox = a.get("bbox") if isinstance(a, dict) else None
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(real_number(v) for v in bbox)):
            raise DataError(f"{ann}: annotations[{i}] needs 'bbox' as 4 numbers [x, y, width, height], got {str(bbox)[:80]}")
        image_id, category_id = a.get("image_id"), a.get("category_id")
        if not (whole_number(image_id) and image_id in per_image) or not (whole_number(category_id) and category_id in cat_index):
            raise DataError(f"{ann}: annotations[{i}] (id {str(a.get('id'))[:40]}) has an unknown image_id or category_id")
        if image_id not in info:
            continue  # an image past those asked for
        _, width, height = info[image_id]
        box = _coco_box(bbox, width, height)
        if box is None:
            raise DataError(f"{ann}: annotations[{i}] (id {str(a.get('id'))[:40]}) has bbox {bbox} outside its "
                            f"{width}x{height} image or of no size; fix or remove it")
        per_image[image_id].append((box, cat_index[category_id]))
    samples = []
    for image_id, (path, width, height) in info.items():
        boxes = np.asarray([b for b, _ in per_image[image_id]], np.float32).reshape(-1, 4)
        classes = np.asarray([c for _, c in per_image[image_id]], np.int64)
        samples.append(Sample(path, boxes, classes, width, height))
    return samples


def load_split(root: Path, split: str, num_classes: int, first: int | None = None) -> list[Sample]:
    """COCO JSON if ``annotations/{split}.json`` exists, else the YOLO layout; the ``first`` images
    alone (None: all), the others' files not read."""
    if not root.is_dir():
        raise DataError(f"--data {str(root)!r} is not a folder; create one with `edgeport data synth --out DIR`")
    ann = root / "annotations" / f"{split}.json"
    if ann.exists() or ann.is_symlink():  # a broken link is an error, not a dataset in another layout
        return load_coco_split(root, split, num_classes, first)
    return load_yolo_split(root, split, num_classes, first)


def preflight(samples: list[Sample]) -> None:
    """Decode every image once before training: a truncated or unreadable file is named here, not mid-epoch."""
    for sample in samples:
        read_image(load_image, sample.image)


def write_dataset(root: Path, splits: dict[str, list], *, size: int) -> None:
    """Write scenes (``train.synth.Scene``) in the YOLO layout and as COCO JSON."""
    from PIL import Image

    for split, scenes in splits.items():
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        (root / "annotations").mkdir(parents=True, exist_ok=True)
        coco = {"images": [], "annotations": [], "categories": [{"id": 1, "name": "person"}]}
        for i, scene in enumerate(scenes):
            name = f"{split}_{i:05d}.png"
            Image.fromarray(scene.image).save(root / "images" / split / name)
            lines = []
            coco["images"].append({"id": i + 1, "file_name": name, "width": size, "height": size})
            for box, cls in zip(scene.boxes, scene.classes):
                x1, y1, x2, y2 = (float(v) for v in box)
                lines.append(f"{int(cls)} {(x1 + x2) / 2 / size:.6f} {(y1 + y2) / 2 / size:.6f} {(x2 - x1) / size:.6f} {(y2 - y1) / size:.6f}")
                coco["annotations"].append(
                    {"id": len(coco["annotations"]) + 1, "image_id": i + 1, "category_id": int(cls) + 1,
                     "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": 0}
                )
            (root / "labels" / split / f"{Path(name).stem}.txt").write_text("\n".join(lines) + ("\n" if lines else ""))
        (root / "annotations" / f"{split}.json").write_text(json.dumps(coco))

