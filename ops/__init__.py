"""Board-exact operators: the upsample rules that decide each site in PyTorch (one per file,
``registry.py``), ``board_upsample.BoardUpsample`` (the board's semantics, for training), and,
after conversion, the .tflite graph (``tflite_graph``, ``tflite_versions``) and the board
lowering (``lowering/``).
"""
