"""``python -m edgeport.train ...`` (and ``torchrun -m edgeport.train ...``)."""

import sys

from edgeport.train.launch import main

sys.exit(main())
