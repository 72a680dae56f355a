"""The PEP 517 build backend: setuptools, less one notice.

The repository root *is* the ``edgeport`` package (``package-dir = {"edgeport" = "."}``, so
the design's top-level folders install as ``edgeport.convert`` ...). An editable install of
such a layout goes through setuptools' meta-path finder, and setuptools then prints an
``InformationOnly`` notice ("be careful with folders named like your package") on every
``pip install -e .``. It is not a warning about this project: silence that category only.
"""

import warnings

from setuptools.build_meta import *  # noqa: F403 - the backend's hooks, unchanged
from setuptools.warnings import InformationOnly

warnings.filterwarnings("ignore", category=InformationOnly)
