"""Command line: ``edgeport convert|...`` and the ``convert`` shortcut.

Exit codes: 0 success; 1 the parity or board gate failed (artifacts kept); 2 bad input or
usage -- one line on stderr, no traceback, nothing left behind; 3 an internal error (one
line, the full traceback in a log file it names); 130/143 interrupted by SIGINT/SIGTERM,
with nothing left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from edgeport import __version__
from edgeport.cliargs import SEED_RANGE, Parser, int_range, positive_int, seed
from edgeport.convert.converters.base import NAMES as CONVERTERS  # (it imports nothing heavy)
from edgeport.errors import report
from edgeport.process import Terminated, exit_now, handle_sigterm

# models.heads.HEADS, without importing numpy at start-up
HEAD_CHOICES = ("auto", "pdet", "yolov8", "yolov8-pose", "yolov8-seg", "yolov8-obb", "yolov10", "yolov5", "classify", "raw")
# the TorchScript ONNX exporter's range, from the lowest opset onnx2tf converts well
OPSETS = (11, 20)


def _add_output_args(p) -> None:
    """What convert and validate both need to know about the model's outputs."""
    p.add_argument("--outputs", metavar="SPEC", help="which tensors are the outputs when the model returns a dict or nested "
                   "tuple: flatten, or keys/indices such as 0 or out,aux (default: the model must return a tensor or a tuple of tensors)")
    p.add_argument("--head", default="auto", choices=HEAD_CHOICES, help="the output format, for boxes and per-group metrics: pdet, "
                   "yolov8 ((N, 4+nc, A)), yolov8-pose, yolov8-seg, yolov8-obb (boxes, classes, angle), yolov10 (end-to-end "
                   "(N, K, 6)), yolov5 ((N, A, 5+nc)), classify ((N, C) logits), raw; default auto: from the output shapes and the "
                   "model's own head, asking when several fit")


def _add_runner_arg(p) -> None:
    p.add_argument("--runner", metavar="URL", help="run the board's rows on a real board over SSH: ssh://user@host[:port] (default: "
                   "the profile's [runner], else the runtime `edgeport boards install` made, else the emulator only)")


def _add_convert_args(p: argparse.ArgumentParser) -> None:
    given = p.add_argument_group("input: the model and its images")
    given.add_argument("checkpoint", type=Path, help="the .pt/.pth checkpoint (state_dict, training dict or, trusted, a pickled module)")
    given.add_argument("--arch", help="registry name (pdet-n, pdet-s, ...; an unknown name lists them all) or package.module:callable; "
                       "not needed for edgeport trainer checkpoints")
    given.add_argument("--imgsz", type=positive_int, help="square input size, a multiple of the model's stride where it states one (default: the size "
                       "the checkpoint was trained at, where it records one; else 320)")
    given.add_argument("--calib", type=Path, help="folder of images as the model takes them, for int8 calibration (default: "
                       "synthetic scenes); with 16 or more and no --val, every fourth is held out to judge the files on")
    given.add_argument("--val", type=Path, help="folder of images to judge the files on, apart from --calib (default: held out of "
                       "--calib, or synthetic scenes)")
    _add_output_args(given)
    target = p.add_argument_group("target: the board and how the files are made")
    target.add_argument("--board", default="default", help="target board profile: a name from `edgeport boards` or a .toml path "
                        "(default: default)")
    _add_runner_arg(target)
    target.add_argument("--converter", choices=CONVERTERS, default="onnx2tf", help="which converter writes the TFLite files: "
                        "onnx2tf (from the ONNX graph; default) or litert-torch (from the PyTorch model; `edgeport converters "
                        "install litert-torch` first)")
    target.add_argument("--no-int8", action="store_true", help="skip the full-integer int8 model")
    target.add_argument("--no-repair", action="store_true", help="where a quantised file fails its gate, write no repaired "
                        "file (model_int8_repaired.tflite) and fail on the pure file")
    target.add_argument("--opset", type=int_range(*OPSETS), default=17, help=f"ONNX opset, {OPSETS[0]}-{OPSETS[1]} (default 17)")
    target.add_argument("--legacy-resize", action="store_true",
                        help="emit bilinear resizes the way older converters did (half_pixel_centers off): reproduces the board bug")
    target.add_argument("--cross-check", action="store_true", help="also convert float32 with the other converter and compare the "
                        "two files (report: converter.cross_check; a disagreement names the first op where they part)")
    out = p.add_argument_group("output")
    out.add_argument("--out", type=Path, help="output folder (default: a new numbered folder under runs/convert/)")
    out.add_argument("--force", action="store_true", help="replace an earlier convert result in --out (never other files)")
    trust = p.add_argument_group("trust")
    trust.add_argument("--trust-checkpoint", action="store_true",
                       help="allow full unpickling (runs code from the file): only for checkpoints you trust")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="edgeport", description="Ship a DDP + SyncBN trained PyTorch detector to a TFLite board, with proof.")
    parser.add_argument("--version", action="version", version=f"edgeport {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    conv = sub.add_parser(
        "convert",
        help="checkpoint -> ONNX -> TFLite float32/int8, with a parity report",
    )
    _add_convert_args(conv)

    train = sub.add_parser("train", help="train a detector: DDP (gloo/NCCL), SyncBN, accumulation with no_sync",
                           add_help=False)
    train.add_argument("train_args", nargs=argparse.REMAINDER, help="the trainer's own options: edgeport train --help lists them")
    val = sub.add_parser("validate", help="validate a TFLite model made by any converter against the PyTorch checkpoint")
    val.add_argument("checkpoint", type=Path, help="the PyTorch checkpoint the file was made from: what it is judged against")
    val.add_argument("--tflite", type=Path, required=True, help="the .tflite model to judge")
    val.add_argument("--arch", help="as for convert; not needed for edgeport trainer checkpoints")
    val.add_argument("--imgsz", type=positive_int, help="must match the TFLite input (default: read from it)")
    val.add_argument("--board", default="default", help="board profile for the emulator and the gate (default: default)")
    _add_output_args(val)
    _add_runner_arg(val)
    val.add_argument("--data", type=Path, help="a dataset folder (val split with labels: mAP@0.5:0.95, mAP@0.5 and each class's "
                     "AP on every image, streamed) or a folder of images")
    val.add_argument("--images", type=positive_int, help="measure the first N images of --data (default: every one; parity's "
                     "rows are judged on the first 32)")
    val.add_argument("--rows", choices=("all", "file"), default="all",
                     help="all (default): every runtime and the board's, PyTorch's mAP beside the file's; file: the file on "
                     "TFLite's optimised kernels (parity on the first 8 images at 320 px and above) and its mAP alone, the work "
                     "`yolo val` does")
    val.add_argument("--out", type=Path, help="report folder (default: a new numbered folder under runs/validate/, named when "
                     "it is written)")
    val.add_argument("--force", action="store_true", help="replace an earlier validate result in --out (never other files)")
    val.add_argument("--trust-checkpoint", action="store_true", help="allow full unpickling of the checkpoint")
    chk = sub.add_parser("check", help="compare a parity report with a baseline: the CI regression gate")
    chk.add_argument("report", type=Path, help="the report.json to judge, as `edgeport convert` or `validate` wrote it")
    chk.add_argument("--baseline", type=Path, required=True, help="the report.json it must be no worse than (a committed "
                     "copy of an earlier report; with --update-baseline, the file to replace)")
    chk.add_argument("--tolerance", action="append", default=[], metavar="KEY=VALUE",
                     help="cosine (1e-4), max_abs_factor (2), max_abs_floor (1e-6), recall (0.02), map (0.01)")
    chk.add_argument("--update-baseline", action="store_true", help="accept this report as the new baseline")
    boards = sub.add_parser("boards", help="list board profiles; check a .tflite against one; install or probe a board's runtime")
    boards_sub = boards.add_subparsers(dest="boards_command", metavar="BOARDS_COMMAND", parser_class=Parser)
    binstall = boards_sub.add_parser("install", help="install a board's real runtime on this machine (tflite-1.13: TensorFlow "
                                     "Lite 1.13.1 on Python 3.7), so its rows come from the runtime itself")
    binstall.add_argument("board", help="board profile name or .toml path with an [install] section")
    binstall.add_argument("--python", help="the Python to build it with (default: pythonX.Y on PATH, else pyenv's)")
    bprobe = boards_sub.add_parser("probe", help="ask a board's runtime which builtin op versions it has; prints the op table "
                                   "(validate/board_profiles/NAME.ops.toml)")
    bprobe.add_argument("board", help="board profile name or .toml path")
    bprobe.add_argument("--runner", metavar="URL", help="probe a real board over SSH: ssh://user@host[:port]")
    bprobe.add_argument("--out", type=Path, help="write the table to this new file (default: standard output)")
    bcheck = boards_sub.add_parser("check", help="list every reason a board cannot run a .tflite model (exit 0 runnable, 1 not)")
    bcheck.add_argument("model", type=Path, help="the .tflite file to check against the board")
    bcheck.add_argument("--board", required=True, help="board profile name or .toml path")
    convs = sub.add_parser("converters", help="list the converters; install litert-torch, the second one")
    convs_sub = convs.add_subparsers(dest="converters_command", metavar="CONVERTERS_COMMAND", parser_class=Parser)
    cinstall = convs_sub.add_parser("install", help="install a converter in its own environment under EDGEPORT_HOME "
                                    "(litert-torch: about 1 GB, on this environment's torch; onnx2tf comes with `make setup`)")
    cinstall.add_argument("converter", choices=CONVERTERS, help="the converter to install in its own environment")
    data = sub.add_parser("data", help="datasets: `edgeport data synth` writes a synthetic person dataset")
    data_sub = data.add_subparsers(dest="data_command", metavar="DATA_COMMAND", parser_class=Parser, required=True)
    synth = data_sub.add_parser("synth", help="write a synthetic person dataset (YOLO layout + COCO JSON)")
    synth.add_argument("--out", type=Path, required=True, help="the new dataset's folder (images/, labels/, annotations/)")
    synth.add_argument("--n", type=positive_int, default=500, help="training images (validation gets a fifth as many, at least 10)")
    synth.add_argument("--n-val", type=positive_int, help="validation images (default: n/5)")
    synth.add_argument("--imgsz", type=int_range(32, 4096), default=160, help="image size in pixels (32-4096)")
    synth.add_argument("--seed", type=seed, default=0, help=f"seed of the scenes ({SEED_RANGE[0]}-{SEED_RANGE[1]}; default 0)")
    synth.add_argument("--force", action="store_true", help="replace an earlier `data synth` dataset in --out (never other files)")
    return parser


def run_convert(args: argparse.Namespace) -> int:
    from edgeport.checkpoints import sniff

    sniff(args.checkpoint)  # a path that is no checkpoint: said in a moment, before the heavy imports
    from edgeport.commands import output
    from edgeport.commands.boards import board
    from edgeport.commands.convert import convert

    out, report = convert(args.checkpoint, board=board(args.board, args.runner), out=args.out, force=args.force,
                          console=output.console(), arch=args.arch, imgsz=args.imgsz, calib_dir=args.calib, val_dir=args.val,
                          trust_checkpoint=args.trust_checkpoint, opset=args.opset, int8=not args.no_int8,
                          legacy_resize=args.legacy_resize, head=args.head, outputs=args.outputs, converter=args.converter,
                          cross_check=args.cross_check, repair=not args.no_repair)
    return output.finish(out, report, "artifacts and report")


def run_validate(args: argparse.Namespace) -> int:
    from edgeport.checkpoints import sniff

    sniff(args.checkpoint)
    from edgeport.commands import output
    from edgeport.commands.boards import board
    from edgeport.commands.validate import validate

    out, report = validate(args.checkpoint, args.tflite, board=board(args.board, args.runner), out=args.out, force=args.force,
                           arch=args.arch, imgsz=args.imgsz, data=args.data, trust_checkpoint=args.trust_checkpoint,
                           console=output.console(), head=args.head, outputs=args.outputs, images=args.images, rows=args.rows)
    return output.finish(out, report, "report")


def run_check(args: argparse.Namespace) -> int:
    from edgeport.commands.check import check

    return check(args.report, args.baseline, tolerances=args.tolerance, update_baseline=args.update_baseline)


def run_data(args: argparse.Namespace) -> int:
    from edgeport.commands.data import synth

    return synth(args.out, n=args.n, n_val=args.n_val, imgsz=args.imgsz, seed=args.seed, force=args.force)


def run_boards(args: argparse.Namespace) -> int:
    from edgeport.commands import boards

    if args.boards_command is None:
        return boards.list_boards()
    if args.boards_command == "install":
        return boards.install(args.board, python=args.python)
    if args.boards_command == "probe":
        return boards.probe(args.board, runner=args.runner, out=args.out)
    return boards.check(args.model, board_name=args.board)


def run_converters(args: argparse.Namespace) -> int:
    from edgeport.commands import converters

    if args.converters_command is None:
        return converters.list_converters()
    return converters.install(args.converter)


COMMANDS = {"convert": run_convert, "data": run_data, "boards": run_boards, "validate": run_validate, "check": run_check,
            "converters": run_converters}


def _ignore_further_signals() -> None:
    """Once unwound, exit with the code said: a signal still pending (or a second one) must not
    turn it into a death by signal or a traceback during interpreter shutdown."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _stdout_gone() -> bool:
    """Whether the reader of stdout closed its end (a pipe's write end then polls POLLERR)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no real file behind stdout
        return False


def _dispatch(args: argparse.Namespace, prog: str) -> int:
    handle_sigterm()
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        _ignore_further_signals()
        print(f"{prog}: interrupted; nothing was left behind", file=sys.stderr)
        exit_now(130)
    except Terminated:
        _ignore_further_signals()
        print(f"{prog}: terminated; nothing was left behind", file=sys.stderr)
        exit_now(143)
    except BrokenPipeError as exc:
        if not _stdout_gone():
            return report(prog, exc)  # a pipe of its own (a child, a transport): an internal error
        # the reader of our output went away (`edgeport boards | head -1`): not an error of the
        # run, and no one to report to; exit as a tool killed by SIGPIPE does, nothing left behind
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        exit_now(141)
    except Exception as exc:  # one line and an honest exit code, never a traceback
        if os.environ.get("EDGEPORT_DEBUG"):
            raise
        return report(prog, exc)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:
        # the trainer owns its options (it is also `python -m edgeport.train` under torchrun)
        from edgeport.train.launch import main as train_main

        return train_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return _dispatch(args, "edgeport")


def entry(command=main) -> None:
    """The process's entry point (the console scripts, ``python -m edgeport.cli``): run ``command``, then
    exit without the interpreter's teardown of torch -- its op-library finalizers and a last garbage
    collection, a cost paid for nothing (docs/measured.md); every command has closed its files, removed its
    staging folders and ended its children by then. ``train`` ends as its workers do (``train.launch.exit_process``)
    and keeps the collector as it is (training makes and drops objects for hours); any other command is one-shot
    (``_lazy.importing``)."""
    from edgeport._lazy import one_shot_process

    training = sys.argv[1:2] == ["train"]
    if not training:
        one_shot_process()
    code = command()
    if training:
        from edgeport.train.launch import exit_process

        exit_process(code)
    exit_now(code)


def entry_convert() -> None:
    """The ``convert`` console script's process entry point."""
    entry(convert_main)


def convert_main(argv: list[str] | None = None) -> int:
    """The ``convert`` console script: the same as ``edgeport convert``."""
    parser = Parser(prog="convert", description="The same as `edgeport convert`.")
    _add_convert_args(parser)
    args = parser.parse_args(argv)
    args.command = "convert"
    return _dispatch(args, "convert")


if __name__ == "__main__":
    entry()
