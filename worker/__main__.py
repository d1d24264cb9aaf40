"""Entry point: `python -m worker --root DIR`."""

import sys

from worker.proctime import IMPORT_TIME as _IMPORT_TIME  # noqa: F401  (earliest fallback stamp)
from worker.runtime import main

sys.exit(main())
