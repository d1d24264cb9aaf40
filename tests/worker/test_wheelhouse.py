"""Installing a job's requirements in a session (worker/wheelhouse.py): offline from a mounted
wheel set, built once where none is usable, and every unusable set (another interpreter's, a
partial one) falling back to the index with a log line that says why. pip runs for real,
offline: the "index" is a folder of wheels made here, and installs go to a folder of their own."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import pytest

from tests.factories import wheel_file
from tests.support.marks import starts_processes
from worker.wheelhouse import (
    BUILT,
    INDEX,
    OFFLINE,
    WHEELSET_FILE,
    install_requirements,
    interpreter_tag,
)

REQUIREMENT = "baton-wheel-req"


@pytest.fixture
@starts_processes  # pip
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The index a session with internet reaches (a find-links folder here)."""
    folder = tmp_path / "index"
    wheel_file(folder, REQUIREMENT, "1.0")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_TARGET", str(tmp_path / "site"))
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    return folder


def _installed(tmp_path: Path) -> set[str]:
    return {p.name.removesuffix(".dist-info") for p in (tmp_path / "site").glob("*.dist-info")}


def _built_set(tmp_path: Path, index: Path) -> Path:
    built = install_requirements([REQUIREMENT], [], build=True)
    assert built is not None
    assert built.how == BUILT
    assert built.built is not None
    return built.built


def test_a_session_builds_a_set_that_a_later_one_installs_from_with_the_index_gone(
    tmp_path: Path, index: Path
) -> None:
    built = _built_set(tmp_path, index)
    assert [p.name for p in built.glob("*.whl")] == ["baton_wheel_req-1.0-py3-none-any.whl"]
    assert json.loads((built / WHEELSET_FILE).read_text())["interpreter"] == interpreter_tag()
    assert _installed(tmp_path) == {"baton_wheel_req-1.0"}
    # The next session: a fresh site, and the index unreachable (it would fail the install).
    (index / "baton_wheel_req-1.0-py3-none-any.whl").unlink()
    for dist in (tmp_path / "site").iterdir():
        dist.rename(tmp_path / f"old-{dist.name}")
    installed = install_requirements([REQUIREMENT], [tmp_path / "nothing-here", built], build=True)
    assert installed is not None
    assert (installed.how, installed.built) == (OFFLINE, None)
    assert _installed(tmp_path) == {"baton_wheel_req-1.0"}


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (lambda s: s.update(interpreter="cpython-27-win32"), "built for cpython-27-win32"),
        (lambda s: s.update(requirements=["something-else"]), "other requirements"),
    ],
)
def test_a_set_for_another_interpreter_or_other_requirements_falls_back_to_the_index(
    tmp_path: Path, index: Path, caplog: pytest.LogCaptureFixture, spoil: object, reason: str
) -> None:
    built = _built_set(tmp_path, index)
    described = json.loads((built / WHEELSET_FILE).read_text())
    spoil(described)  # type: ignore[operator]
    (built / WHEELSET_FILE).write_text(json.dumps(described))
    with caplog.at_level(logging.WARNING, "worker.wheelhouse"):
        installed = install_requirements([REQUIREMENT], [built], build=False)
    assert installed is not None
    assert installed.how == INDEX
    assert reason in caplog.text
    assert "installing from the index" in caplog.text


def test_a_partial_set_falls_back_to_building_a_new_one(
    tmp_path: Path, index: Path, caplog: pytest.LogCaptureFixture
) -> None:
    built = _built_set(tmp_path, index)
    for wheel in built.glob("*.whl"):
        wheel.unlink()
    with caplog.at_level(logging.WARNING, "worker.wheelhouse"):
        installed = install_requirements([REQUIREMENT], [built], build=True)
    assert installed is not None
    assert installed.how == BUILT
    assert "pip cannot install from it" in caplog.text


def test_requirements_that_cannot_be_resolved_fail_loudly_after_the_fallback(
    tmp_path: Path, index: Path
) -> None:
    """No wheel set can be built; today's install then fails the session, as before."""
    with pytest.raises(subprocess.CalledProcessError):
        install_requirements(["baton-no-such-requirement"], [], build=True)


def test_no_requirements_install_nothing(tmp_path: Path) -> None:
    assert install_requirements([], [tmp_path], build=True) is None
