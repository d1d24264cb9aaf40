"""What a session and the orchestrator agree on: the one owner of the boundary between them.

The segment contract and the manifest (`contract`, `manifest`), the launch id (`launch_id`), the
layout of a session's directory (`paths`), successor planning and its padding (`planning`), a
running session's heartbeat (`heartbeat`), a Kaggle kernel's options (`kernel_options`), how a
checkpoint lies in a dataset version (`version_layout`), the backend error contract (`errors`)
and the length limits of stored texts (`text`). Both sides import it; it imports neither: not
`orchestrator/`, not the training runtime (the rest of `worker/`, `trainers/`, torch). Standard
library only, so it travels into Kaggle kernels with `worker/` and costs the orchestrator
nothing.
"""
