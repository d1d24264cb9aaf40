"""Trainer strings are resolved from source files: nothing is imported, nothing runs."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import yaml

from orchestrator.config import Settings
from orchestrator.service import build_trainer_finder
from orchestrator.trainer_lookup import TrainerFinder, TrainerRejected

REPO_ROOT = Path(__file__).resolve().parents[2]

GOOD = """
import worker
from worker import Trainer
from worker.trainer import Trainer as Base


class Direct(Trainer):
    pass


class ViaModule(worker.Trainer):
    pass


class Aliased(Base):
    pass


class Grandchild(Direct):
    pass


class NotATrainer:
    pass


def function_trainer():
    pass
"""


def _package(root: Path, name: str, files: dict[str, str]) -> Path:
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(files.pop("__init__.py", ""))
    for relative, text in files.items():
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(text)
    return package


@pytest.fixture
def finder(tmp_path: Path) -> TrainerFinder:
    _package(
        tmp_path,
        "mytrainers",
        {
            "models.py": GOOD,
            "sub/__init__.py": "from .deep import Deep\n",
            "sub/deep.py": "from ..models import Direct\n\nclass Deep(Direct):\n    pass\n",
            "other.py": "from mytrainers.models import Grandchild\n\nclass Far(Grandchild): ...\n",
            "broken.py": "class Broken(:\n",
        },
    )
    _package(tmp_path, "notallowed", {"m.py": GOOD})
    return TrainerFinder({"mytrainers", "os", "worker"}, [str(tmp_path)])


@pytest.mark.parametrize(
    "entry",
    [
        "mytrainers.models:Direct",
        "mytrainers.models:ViaModule",
        "mytrainers.models:Aliased",
        "mytrainers.models:Grandchild",
        "mytrainers.sub.deep:Deep",
        "mytrainers.sub:Deep",
        "mytrainers.other:Far",
    ],
)
def test_trainer_subclasses_are_accepted(finder: TrainerFinder, entry: str) -> None:
    finder.check(entry)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("mytrainers.models:NotATrainer", "subclasses worker.Trainer"),
        ("mytrainers.models:function_trainer", "defines no class"),
        ("mytrainers.models:Missing", "defines no class"),
        ("mytrainers.nothing:X", "not found"),
        ("mytrainers.broken:Broken", "not valid Python"),
        ("mytrainers.models.x:Direct", "not found"),
        ("notallowed.m:Direct", "not allowed"),
        ("this.x:Y", "not a trainer package"),
        ("os:system", "not a trainer package"),
        ("subprocess:Popen", "not a trainer package"),
        ("shutil:rmtree", "not a trainer package"),
        ("worker.__main__.x:Y", "dunder"),
        ("mytrainers.__main__:Y", "dunder"),
        ("worker.trainer:Trainer", "not a trainer package"),
        ("mytrainers.models.:X", "dotted module name"),
        ("mytrainers", "look like"),
    ],
)
def test_everything_else_is_refused_with_a_reason(
    finder: TrainerFinder, entry: str, why: str
) -> None:
    with pytest.raises(TrainerRejected, match=why):
        finder.check(entry)


def test_a_module_is_read_not_imported(tmp_path: Path) -> None:
    fired = tmp_path / "fired"
    side_effect = f"open({str(fired)!r}, 'w').write('imported')\n"
    _package(
        tmp_path,
        "loud",
        {"__init__.py": side_effect, "__main__.py": side_effect, "m.py": side_effect + GOOD},
    )
    before = set(sys.modules)
    finder = TrainerFinder({"loud"}, [str(tmp_path)])
    finder.check("loud.m:Direct")
    with pytest.raises(TrainerRejected):
        finder.check("loud.__main__:X")
    assert not fired.exists()
    assert not {name for name in set(sys.modules) - before if name.startswith("loud")}


def test_an_edited_module_is_read_again(tmp_path: Path) -> None:
    module = _package(tmp_path, "edited", {"m.py": "class T:\n    pass\n"}) / "m.py"
    finder = TrainerFinder({"edited"}, [str(tmp_path)])
    with pytest.raises(TrainerRejected):
        finder.check("edited.m:T")
    module.write_text("from worker import Trainer\n\n\nclass T(Trainer):\n    pass\n")
    finder.check("edited.m:T")


def test_concurrent_checks_all_succeed(finder: TrainerFinder, tmp_path: Path) -> None:
    # Many distinct files, so the threads really parse at the same time (gh-106905).
    for index in range(40):
        (tmp_path / "mytrainers" / f"copy{index}.py").write_text(GOOD * 20)
    errors: list[BaseException] = []

    def check(index: int) -> None:
        try:
            finder.check(f"mytrainers.copy{index}:Grandchild")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=check, args=(index,)) for index in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_every_example_trainer_passes_with_the_default_settings() -> None:
    examples = sorted((REPO_ROOT / "trainers" / "examples").glob("*.yaml"))
    assert examples
    finder = build_trainer_finder(Settings())
    for example in examples:
        finder.check(yaml.safe_load(example.read_text())["trainer"])
