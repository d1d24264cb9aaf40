"""The code a kernel carries: it stands alone (nothing from the orchestrator), holds the
operator's trainer as submit found it and no bytecode, and fits in a script Kaggle takes."""

from __future__ import annotations

import io
import random
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from orchestrator.backends.kaggle.packaging import MAX_CODE_BYTES, code_archive

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
        names = archive.getnames()
        archive.extractall(tmp_path / "code", filter="data")
    assert len(names) == len(set(names))  # the worker once, though it is also the trainer
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


def _names(code: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(code)) as archive:
        return archive.getnames()


def test_a_one_file_trainer_is_embedded_as_that_file_and_no_bytecode_travels(
    tmp_path: Path,
) -> None:
    (tmp_path / "solo_trainer.py").write_text("class Solo: ...\n")
    names = _names(code_archive("solo_trainer:Solo", [tmp_path]))
    assert "solo_trainer.py" in names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    assert len(names) == len(set(names))  # every file once
    assert {name.split("/")[0] for name in names} == {"worker", "solo_trainer.py"}


def test_the_operators_package_is_embedded_not_one_of_the_same_name_on_the_import_path(
    tmp_path: Path,
) -> None:
    """`trainers` is also Baton's own example package, on this process's import path."""
    package = tmp_path / "trainers"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "site.py").write_text("class Site: ...\n")
    (package / "__pycache__" / "site.cpython-311.pyc").write_bytes(b"stale")
    (package / "stale.pyc").write_bytes(b"stale")
    names = _names(code_archive("trainers.site:Site", [tmp_path]))
    assert sorted(name for name in names if name.startswith("trainers")) == [
        "trainers/__init__.py",
        "trainers/site.py",
    ]
    assert "worker/kaggle_access/chaining.py" in names


def test_a_trainer_package_too_large_to_embed_is_refused_with_its_size(tmp_path: Path) -> None:
    package = tmp_path / "bulky"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "weights.bin").write_bytes(random.Random(0).randbytes(MAX_CODE_BYTES))
    told = (
        r"the code to embed is (\d+) bytes \(limit 921600\); keep data files out of the trainer's"
    )
    with pytest.raises(ValueError, match=told) as refused:
        code_archive("bulky:Model", [tmp_path])
    size = re.match(told, str(refused.value))
    assert size is not None
    assert int(size[1]) > MAX_CODE_BYTES
