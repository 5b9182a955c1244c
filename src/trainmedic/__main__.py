"""``python -m trainmedic ...``: the command line, for launchers that run modules
(``torchrun --nproc-per-node 2 -m trainmedic profile train.py:recipe``)."""

import sys

from trainmedic.cli.main import main

sys.exit(main())
