"""Pass (validate ``--data`` with labels): mAP on every labelled image, streamed (``validate/dataset_score.py``)."""

from __future__ import annotations

from dataclasses import replace

from edgeport.convert.base import ConvertConfig, Pass, PassResult, Validated
from edgeport.errors import PassCheckError


class DatasetScorePass(Pass[Validated, Validated]):
    name = "dataset"

    def run(self, value: Validated, config: ConvertConfig) -> PassResult[Validated]:
        from edgeport.validate.dataset_score import score_dataset
        from edgeport.validate.parity.runners import TorchRunner
        from edgeport.validate.parity.tflite_runner import TFLiteRunner

        given, head = value.gated.tflite, value.parity.head
        if not given.scored:
            return PassResult(value, changed=False, summary="no labelled dataset to score")
        if not any(len(s.boxes) for s in given.scored):
            return PassResult(value, changed=False, summary=f"no labelled box in the {len(given.scored)} images: no mAP")
        prepared = given.prepared
        (path,) = given.files.values()
        runners = {"tflite": TFLiteRunner(path, list(prepared.output_shapes))}
        if config.rows == "all":  # the mAP the file is measured against
            runners = {"pytorch": TorchRunner(prepared.reference), **runners}
        score = score_dataset(list(given.scored), prepared.imgsz, head, runners)
        if score is None:
            return PassResult(value, changed=False, summary=f"the {head.name} head has no boxes: no mAP")
        said = ", ".join(f"{name} {m['map50_95']:.3f}" for name, m in score.maps.items())
        return PassResult(replace(value, dataset=score), changed=False,
                          summary=f"mAP@0.5:0.95 on {score.images} images: {said}")

    def check(self, before: Validated, after: Validated, config: ConvertConfig) -> None:
        score, scored = after.dataset, before.gated.tflite.scored
        if score is not None and (score.images != len(scored) or not score.maps):
            raise PassCheckError(f"mAP measured on {score.images} images with {len(score.maps)} rows; {len(scored)} were given")
