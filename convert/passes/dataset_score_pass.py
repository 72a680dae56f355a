"""Pass (validate ``--data`` with labels): mAP on every labelled image, streamed, of the file, PyTorch and
the board's own runtime (``validate/dataset_score.py``)."""

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
        shapes = list(prepared.output_shapes)
        runners = {"tflite": TFLiteRunner(path, shapes)}
        if config.rows == "all":  # the mAP the file is measured against, and the board's own
            runners = {"pytorch": TorchRunner(prepared.reference), **runners, **_board(value, config, path, shapes)}
        score = score_dataset(list(given.scored), prepared.imgsz, head, runners, on_progress=config.on_progress)
        if score is None:
            return PassResult(value, changed=False, summary=f"the {head.name} head has no boxes: no mAP")
        said = ", ".join([f"{name} {m['map50_95']:.3f}" for name, m in score.maps.items()] +
                         [f"{name} refused an image" for name in score.refused])
        return PassResult(replace(value, dataset=score), changed=False,
                          summary=f"mAP@0.5:0.95 on {score.images} images: {said}")

    def check(self, before: Validated, after: Validated, config: ConvertConfig) -> None:
        score, scored = after.dataset, before.gated.tflite.scored
        if score is not None and (score.images != len(scored) or not score.maps and not score.refused):
            raise PassCheckError(f"mAP measured on {score.images} images with {len(score.maps)} rows; {len(scored)} were given")


def _board(value: Validated, config: ConvertConfig, path, shapes) -> dict:
    """The board's own runtime as a runner, under its parity row's label, where that row ran the file."""
    from edgeport.validate.board.runtime import transport_for
    from edgeport.validate.parity.board_runner import BoardRunner
    from edgeport.validate.parity.run import board_label

    transport = transport_for(config.board) if config.board is not None else None
    if transport is None:
        return {}
    label = board_label(config.board, transport)
    if not any(r.runtime == label and r.outputs for r in value.parity.rows):
        return {}  # refused on parity's images (its row says so), or not run
    return {label: BoardRunner(transport, path, shapes, runtime=label, workdir=config.work_dir)}
