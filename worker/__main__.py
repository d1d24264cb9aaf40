"""Entry point: `python -m worker --root DIR`."""

import logging
import os
import sys

from worker.proctime import IMPORT_TIME as _IMPORT_TIME  # noqa: F401  (earliest fallback stamp)
from worker.runtime import main

code = main()
# Everything that matters is fsynced by now. Tearing down an interpreter that imported torch takes
# about a second, which the session's hard limit would count: skip it.
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
