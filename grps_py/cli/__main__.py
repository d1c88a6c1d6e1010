"""`python -m grps_py.cli` runs the command line (tests and scripts start servers this way)."""

import sys

from grps_py.cli import main

sys.exit(main())
