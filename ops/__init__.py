"""Board-exact operators: what each upsample becomes (``upsample.py``: kept as converted, or the
one PyTorch-side rewrite, ``--legacy-resize``), ``board_upsample.BoardUpsample`` (the board's
semantics, for training), and, after conversion, the .tflite graph (``tflite_graph``,
``tflite_versions``) and the board lowering (``lowering/``).
"""
