"""``edgeport data synth``: a synthetic person dataset, in the YOLO layout and as COCO JSON."""

from __future__ import annotations

from pathlib import Path

from edgeport.folders import staged_output
from edgeport.text import for_terminal


def synth(out: Path, *, n: int, n_val: int | None, imgsz: int, seed: int, force: bool) -> int:
    import numpy as np

    from edgeport.models.synth import make_scene
    from edgeport.validate.datasets import write_dataset

    n_val = n_val if n_val is not None else max(10, n // 5)
    with staged_output(out, command="data", force=force, default_root=Path("data")) as stage:
        rng_train, rng_val = np.random.default_rng([seed, 0]), np.random.default_rng([seed, 1])
        splits = {
            "train": [make_scene(rng_train, imgsz) for _ in range(n)],
            "val": [make_scene(rng_val, imgsz) for _ in range(n_val)],
        }
        write_dataset(stage.result, splits, size=imgsz)
    boxes = sum(len(s.boxes) for v in splits.values() for s in v)
    print(for_terminal(f"wrote {n} train + {n_val} val images ({boxes} people) to {stage.out}/ (YOLO labels + COCO JSON)"))
    return 0
