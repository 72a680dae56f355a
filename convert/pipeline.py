"""The conversion pipeline: one literal list of passes, each followed by its check, in the phases
of ``convert/base.py``. An error names its pass and the passes before it."""

from __future__ import annotations

from edgeport.convert.base import Pass
from edgeport.convert.passes.board_gate_pass import BoardGatePass
from edgeport.convert.passes.build_model_pass import BuildModelPass
from edgeport.convert.passes.cross_check_pass import CrossCheckPass
from edgeport.convert.passes.dataset_score_pass import DatasetScorePass
from edgeport.convert.passes.export_onnx_pass import ExportOnnxPass
from edgeport.convert.passes.fold_bn_pass import FoldBNPass
from edgeport.convert.passes.given_file_pass import GivenFilePass
from edgeport.convert.passes.int8_fixes_pass import Int8FixesPass
from edgeport.convert.passes.load_checkpoint_pass import LoadCheckpointPass
from edgeport.convert.passes.lower_for_board_pass import LowerForBoardPass
from edgeport.convert.passes.parity_pass import ParityPass
from edgeport.convert.passes.prepare_inputs_pass import PrepareInputsPass
from edgeport.convert.passes.repair_pass import RepairPass
from edgeport.convert.passes.revert_syncbn_pass import RevertSyncBNPass
from edgeport.convert.passes.rewrite_pools_pass import RewritePoolsPass
from edgeport.convert.passes.rewrite_upsample_pass import RewriteUpsamplePass
from edgeport.convert.passes.to_tflite_pass import ToTFLitePass
from edgeport.convert.passes.uint8_pass import Uint8Pass
from edgeport.convert.passes.unwrap_prefixes_pass import UnwrapPrefixesPass

# ConvertConfig -> Checkpoint -> Model
LOAD = (LoadCheckpointPass(), UnwrapPrefixesPass(), BuildModelPass())
# Model -> Prepared
PREPARE = (PrepareInputsPass(),)
# Prepared -> Prepared: what the board computes, exactly
REWRITE = (RevertSyncBNPass(), FoldBNPass(), RewriteUpsamplePass(), RewritePoolsPass())
# Prepared -> Exported -> Converted -> Gated -> Validated
EXPORT = (ExportOnnxPass(),)
CONVERT = (ToTFLitePass(), Int8FixesPass(), Uint8Pass(), CrossCheckPass(), LowerForBoardPass())
GATE = (BoardGatePass(),)
# a repair converts a changed model again, and judges its candidates, by these same passes
PARITY = (ParityPass(), RepairPass(convert=(*EXPORT, *CONVERT), judge=(*GATE, ParityPass())))

PIPELINE: tuple[Pass, ...] = (*LOAD, *PREPARE, *REWRITE, *EXPORT, *CONVERT, *GATE, *PARITY)
# `edgeport validate`: the file it was given in place of one converted, judged as convert judges its own
VALIDATE: tuple[Pass, ...] = (*LOAD, *PREPARE, GivenFilePass(), *GATE, ParityPass(), DatasetScorePass())
