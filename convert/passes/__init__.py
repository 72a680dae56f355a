"""The conversion passes, one per file (``<verb>_<object>_pass.py``): each a ``Pass`` of ``convert/base.py``,
listed in order in ``convert/pipeline.py``."""
