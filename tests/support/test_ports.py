"""Ports for the tests' servers: never one that another test process holds, one that a server
listens on, or one that the kernel may give an outgoing connection."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from tests.support import ports

REPO = Path(__file__).resolve().parents[2]
TAKEN = 50


def test_two_test_processes_starting_at_the_same_port_never_share_one() -> None:
    ports._random.seed(7)  # where the other process starts too
    ours = [ports.free_port() for _ in range(TAKEN)]
    theirs = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import json; from tests.support import ports; ports._random.seed(7); "
                f"print(json.dumps([ports.free_port() for _ in range({TAKEN})]))",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert len(set(ours)) == len(set(theirs)) == TAKEN
    assert not set(ours) & set(theirs)
    below = ports._ephemeral_start()
    assert all(ports.FIRST_PORT <= port < below for port in ours + theirs)


def test_a_port_a_server_listens_on_is_passed_over() -> None:
    ports._random.seed(11)
    first = ports.free_port()  # where a start from this seed lands, now held by this process
    ports._held.pop().release()
    with socket.create_server(("127.0.0.1", first)):
        ports._random.seed(11)
        assert ports.free_port() != first
