"""Detector architectures (``pdet``), their registry, preprocessing and the shared decoder.

Nothing is imported here: ``decode`` and ``preprocess`` are NumPy-only and must stay usable
(by ``edgeport check``, say) without paying for torch.
"""
