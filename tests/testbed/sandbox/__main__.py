"""python -m testbed.sandbox (see the package docstring)."""

import sys

from testbed.sandbox.cli import main

sys.exit(main())
