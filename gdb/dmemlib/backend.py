"""Which array back end the analysis runs on.

numpy decodes headers, groups blocks and scans memory for pointers in whole arrays; Debian's gdb
can import python3-numpy, but a bare python3 may have no numpy, and every answer also comes from
a pure-Python path (struct, bisect, dicts).  Both give identical answers, which the tests check.
"""

import os

from .errors import DmemError

try:  # numpy is optional
    import numpy as np
except ImportError:  # pragma: no cover - depends on the host
    np = None

HAVE_NUMPY = np is not None

NUMPY, PURE = "numpy", "pure"


def choose(name=None):
    """The back end to use: `name` ("numpy" or "pure") if given, else numpy when importable and
    not switched off with DMEM_NO_NUMPY=1 (for comparing the two on real cores)."""
    if name is None:
        name = NUMPY if HAVE_NUMPY and not os.environ.get("DMEM_NO_NUMPY") else PURE
    if name == NUMPY and not HAVE_NUMPY:
        raise DmemError("numpy is not importable here")
    if name not in (NUMPY, PURE):
        raise ValueError("unknown back end %r" % name)
    return name
