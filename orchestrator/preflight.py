"""A preflight's report (`baton kaggle check`, `baton slurm check`): one line a check, each ok,
a warning Baton adapts to, or a failure that stops a job there."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Outcome(enum.StrEnum):
    OK = "ok"
    WARN = "warn"  # works, with a caveat Baton adapts to
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    name: str
    outcome: Outcome
    detail: str


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    def add(self, name: str, outcome: Outcome, detail: str) -> None:
        self.checks.append(Check(name, outcome, detail))

    @property
    def passed(self) -> bool:
        return all(check.outcome is not Outcome.FAIL for check in self.checks)
