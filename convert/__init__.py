"""From checkpoint to artifacts: one pass per file, a literal pipeline list (``pipeline.py``)."""
