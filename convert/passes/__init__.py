"""One ``Pass`` (``convert/base.py``) per file (``<verb>_<object>_pass.py``), listed in order in ``convert/pipeline.py``."""
