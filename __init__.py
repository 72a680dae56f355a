"""edgeport: ship a DDP + SyncBN trained PyTorch detector to a TFLite board, with proof.

The repository root is this package: ``edgeport.convert``, ``edgeport.ops``,
``edgeport.validate``, ``edgeport.models`` and ``edgeport.train`` are its sub-packages.
Heavy back ends (tensorflow, onnx2tf, the TFLite interpreters) are imported lazily.
"""

__version__ = "0.1.0"
