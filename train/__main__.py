"""``python -m edgeport.train ...`` (and ``torchrun -m edgeport.train ...``)."""

from edgeport.train.launch import exit_process, main

exit_process(main())
