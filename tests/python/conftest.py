"""Fixtures of the Python module's tests (tests/python; ctest runs them as
python.module, under scripts/with-redis so that REDIS_PORT names a throwaway
redis-server, as for the C++ Redis tests).

Environment: PYTHONPATH at the built package (<build>/python), SLUICE_CLI the
sluice command. Without REDIS_PORT the Redis cases are skipped; without
SLUICE_CLI those that run the command.
"""

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

import sluice

REDIS_PORT = os.environ.get("REDIS_PORT")
SLUICE_CLI = os.environ.get("SLUICE_CLI")

# The backends: the embedded log store, and on Redis a pressure-protocol
# queue and a Streams topic.
BACKENDS = ["log", "pressure", "stream"]


def redis_location():
    if not REDIS_PORT:
        pytest.skip("no REDIS_PORT: run under scripts/with-redis for the Redis cases")
    return f"redis://127.0.0.1:{REDIS_PORT}/0"


class Backend:
    """A store of one backend and fresh queue names on it."""

    def __init__(self, kind, location):
        self.kind = kind
        self.location = location
        self.store = sluice.Store(location)

    def create(self, bound=1000, **kw):
        name = "py-" + uuid.uuid4().hex[:12]
        self.store.create(name, bound=bound, stream=self.kind == "stream", **kw)
        return name

    def cli(self, *args, input=None, check=True, timeout=60):
        if not SLUICE_CLI:
            pytest.skip("no SLUICE_CLI: the sluice command's path")
        return subprocess.run([SLUICE_CLI, "--store", self.location, *args], input=input,
                              capture_output=True, check=check, timeout=timeout)

    def cli_stat(self, name):
        return json.loads(self.cli("stat", "--json", name).stdout)


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    if request.param == "log":
        return Backend("log", str(tmp_path / "store"))
    return Backend(request.param, redis_location())


@pytest.fixture
def log(tmp_path):
    return Backend("log", str(tmp_path / "store"))


def python_child(code, *args, **kw):
    """A child python3 running `code` with this package importable."""
    return subprocess.Popen([sys.executable, "-c", code, *args], env=os.environ.copy(), **kw)


def run_python_child(code, *args, deadline=30):
    """Runs `code` in a child python3 to its end: (returncode, stdout, stderr);
    a child still running after `deadline` seconds fails the test as hung."""
    child = python_child(code, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = child.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        pytest.fail(f"child still running after {deadline}s (hung)\n"
                    f"stdout: {out!r}\nstderr: {err!r}")
    return child.returncode, out.decode(), err.decode()


def wait_for(predicate, timeout=20.0, what="a condition"):
    """Polls `predicate` until it is true (another process's state), or fails."""
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def netstrings(data):
    """Parses `sluice get --binary` output ("LEN:BYTES," each)."""
    out, i = [], 0
    while i < len(data):
        colon = data.index(b":", i)
        n = int(data[i:colon])
        out.append(data[colon + 1:colon + 1 + n])
        assert data[colon + 1 + n:colon + 2 + n] == b","
        i = colon + 2 + n
    return out


def to_netstrings(msgs):
    return b"".join(b"%d:%s," % (len(m), m) for m in msgs)
