"""python -m tests.kaggle_emulator --port 7777 --root DIR [--user NAME:KEY ...]"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
import threading
from pathlib import Path

from tests.kaggle_emulator.emulator import Emulator
from tests.kaggle_emulator.options import EmulatorOptions


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.kaggle_emulator")
    parser.add_argument("--port", type=int, default=7777)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--root", type=Path, default=None, help="state directory (default: temp)")
    parser.add_argument(
        "--user", action="append", default=[], help="NAME:KEY, repeatable (default alice)"
    )
    parser.add_argument("--week-seconds", type=float, default=7 * 24 * 3600.0)
    parser.add_argument("--gpu-allowance-seconds", type=float, default=30 * 3600.0)
    parser.add_argument("--dataset-processing-seconds", type=float, default=1.0)
    parser.add_argument("--gpu-overflow", choices=("reject", "queue"), default="reject")
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    users = dict(u.split(":", 1) for u in args.user) or {"alice": "alice-key"}
    root = args.root or Path(tempfile.mkdtemp(prefix="kaggle-emulator-"))
    options = EmulatorOptions(
        users=users,
        host=args.host,
        port=args.port,
        week_seconds=args.week_seconds,
        gpu_allowance_seconds=args.gpu_allowance_seconds,
        dataset_processing_seconds=args.dataset_processing_seconds,
        gpu_overflow=args.gpu_overflow,
    )
    emulator = Emulator(root, options)
    emulator.faults.rate = args.fault_rate
    emulator.faults.reseed(args.seed)
    emulator.start()
    print(f"Kaggle emulator at {emulator.url}, state in {root}, users {sorted(users)}", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with contextlib.suppress(KeyboardInterrupt):
        stopped.wait()
    emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
