"""``python -m edgeport.train ...`` (and ``torchrun -m edgeport.train ...``)."""

from edgeport.train.launch import die_with_launcher, exit_process, main

die_with_launcher()  # a worker `edgeport train --world-size N` started ends with it
exit_process(main())
