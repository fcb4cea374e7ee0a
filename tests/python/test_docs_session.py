"""docs/python.md's "A session" is real: its scripts and commands, run here
in a temporary directory, print what the page shows (PIDs aside)."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import sluice

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md")


def session():
    """The ```text block under "## A session": its lines."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    part = text.split("## A session", 1)[1]
    return part.split("```text\n", 1)[1].split("```", 1)[0].splitlines()


def steps(lines):
    """("file", name, content) for `$ cat NAME` blocks, ("run", command,
    expected output) for the other `$ ...` lines."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        assert line.startswith("$ "), f"not a command: {line!r}"
        cmd = line[2:]
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("$ "):
            body.append(lines[i])
            i += 1
        while body and body[-1] == "":
            body.pop()
        m = re.fullmatch(r"cat (\S+\.py)", cmd)
        out.append(("file", m.group(1), "\n".join(body) + "\n") if m else ("run", cmd, body))
    return out


def normal(lines):
    return [re.sub(r"(PID |holder: )\d+", r"\g<1>N", line) for line in lines]


@pytest.mark.skipif(not os.environ.get("SLUICE_CLI"), reason="needs SLUICE_CLI (the sluice command)")
def test_the_session_prints_what_the_page_shows(tmp_path):
    store = str(tmp_path / "demo-store")
    shutil.rmtree(store, ignore_errors=True)
    # The scripts run in tmp_path: the module this test imported, by an absolute path.
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(sluice.__file__))))
    ran = 0
    for kind, name, body in steps(session()):
        if kind == "file":
            (tmp_path / name).write_text(body.replace("/tmp/demo-store", store))
            continue
        words = name.replace("/tmp/demo-store", store).split()
        if words[0] == "python3":
            words[0] = sys.executable
        elif words[0] == "sluice":
            words[0] = os.environ["SLUICE_CLI"]
        else:
            pytest.fail(f"a command the test does not know: {name}")
        got = subprocess.run(words, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                             env=env)
        assert got.returncode == 0, (name, got.stderr)
        assert normal(got.stdout.splitlines()) == normal(body), name
        ran += 1
    assert ran >= 4  # the page's two scripts and two sluice commands
