"""edgeport: ship a DDP + SyncBN trained PyTorch detector to a TFLite board, with proof.

The repository root is this package: ``edgeport.convert``, ``edgeport.ops``,
``edgeport.validate``, ``edgeport.models`` and ``edgeport.train`` are its sub-packages.
Heavy back ends (tensorflow, onnx2tf, the TFLite interpreters) are imported lazily.
"""

import os as _os

__version__ = "0.1.0"

# No network at run time, ever. ONNX Runtime's Linux wheels (1.32) upload usage events (a DNS
# lookup for a Microsoft events host seconds after the first session); only this variable,
# read when onnxruntime is first imported, stops it -- so it is set before anything imports
# it, and child processes (onnx2tf) inherit it.
_os.environ["ORT_DISABLE_TELEMETRY"] = "1"
