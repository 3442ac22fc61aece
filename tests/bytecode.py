"""Bytecode caches on, for the test process and every process it starts: imported first
by ``tests/conftest.py``.

With PYTHONDONTWRITEBYTECODE set (this project's CI environment sets it), no ``.pyc`` is
ever written for the tree's own modules: each of the suite's pytest processes rewrote
the asserts of all ~420 test modules again (collection 21 CPU s instead of 7), and each
fresh interpreter compiled netbay's modules again. The caches go to ``__pycache__``,
which git ignores.
"""

import os
import sys

sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
