"""One session of way (c), as the Kaggle guides do it: save every N steps, no deadline awareness.

Usage: python -m benchmarks.periodic_session RUN_DIR SESSION_INDEX WORKLOAD_JSON

Like `Trainer(save_steps=N)` re-run with `resume_from_checkpoint`: resume from the last save,
train, save at every multiple of N and at the end. No SIGTERM handler is installed, so the
supervisor's SIGTERM at the session limit kills it on the spot.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from worker.proctime import process_start_time


def main(argv: list[str]) -> int:
    process_start = process_start_time()
    from benchmarks.loop import ResumedTraining
    from benchmarks.workload import Workload

    run_dir, session = Path(argv[1]), int(argv[2])
    workload = Workload.from_dict(json.loads(argv[3]))
    training = ResumedTraining(workload, run_dir, session, process_start)
    while not training.done:
        training.train_step()
        if training.step % workload.save_every == 0 or training.done:
            training.save()
    training.events.write("done", step=training.step)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
