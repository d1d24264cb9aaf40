import subprocess
import sys

from tests.support.segments import REPO_ROOT

TORCH_FREE = [
    "worker",
    "worker.boundary.contract",
    "worker.boundary.manifest",
    "worker.deadline",
    "worker.stopflag",
    "worker.trainer",
    "worker.digest",
    "worker.sampler",
    "worker.boundary.launch_id",
    "worker.boundary.paths",
    "worker.boundary.planning",
    "worker.boundary.errors",
    "orchestrator.planner",
]


def test_orchestrator_side_modules_import_without_torch():
    # A fresh interpreter: this test process has torch loaded already.
    code = f"import sys; import {', '.join(TORCH_FREE)}; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)
