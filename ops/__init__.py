"""Board-exact operator rewrites, one rule per file, registered in ``registry.py``.

``board_upsample.BoardUpsample`` is the board-semantics upsample for training;
``half_pixel_bilinear.HalfPixelBilinear2x`` is PyTorch's bilinear x2 from TFLite 1.13 ops.
"""
