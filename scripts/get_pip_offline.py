"""Offline stand-in for get-pip.py (scripts/sanity.sh puts it where ansible-test caches the real
one): pip from the interpreter's own ensurepip, then the requested pip version from the
configured package index."""

import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
