"""The load benchmark's client: `locust --headless -f benchmarks/locustfile.py`, run per phase by
benchmarks/load.py. Its users GET the phase's paths in turn, each user paced to rate / users
requests a second, with the API token; the plan is the JSON file named by BATON_LOAD_PLAN."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

from locust import FastHttpUser, constant_throughput, task

_PLAN = json.loads(Path(os.environ["BATON_LOAD_PLAN"]).read_text())
_PATHS = itertools.cycle(_PLAN["paths"])
_HEADERS = {"Authorization": f"Bearer {_PLAN['token']}"}


class Reader(FastHttpUser):
    wait_time = constant_throughput(_PLAN["rate"] / _PLAN["users"])

    @task
    def read(self) -> None:
        self.client.get(next(_PATHS), name=_PLAN["name"], headers=_HEADERS)
