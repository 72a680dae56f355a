"""Board-exact operators: what each upsample becomes (``upsample.py``), the board's own upsample for
training (``board_upsample.py``), and, after conversion, the .tflite graph (``tflite_graph``,
``tflite_versions``) and the board lowering (``lowering/``).
"""
