"""python -m specdeploy.node.doctor: the hardware doctor (see the package docstring)."""

import sys

from specdeploy.node.doctor.cli import main

sys.exit(main())
