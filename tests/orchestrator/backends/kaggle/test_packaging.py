"""The code a self-chaining kernel carries stands alone: nothing from the orchestrator."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

from orchestrator.backends.kaggle.packaging import code_archive

_IMPORT_KERNEL_SIDE = """
import sys
sys.path.insert(0, sys.argv[1])
import worker.kaggle_access.chaining, worker.kaggle_session, worker.kaggle_probe
loaded = sorted(name for name in sys.modules if name.split(".")[0] == "orchestrator")
assert not loaded, loaded
assert worker.kaggle_access.chaining.__file__.startswith(sys.argv[1])
print("standalone")
"""


def test_the_self_chaining_code_imports_without_the_orchestrator(tmp_path: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(code_archive("worker"))) as archive:
        archive.extractall(tmp_path / "code", filter="data")
    assert not (tmp_path / "code" / "orchestrator").exists()
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_KERNEL_SIDE, str(tmp_path / "code")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "standalone"
