"""hetsoak's detectors, against a fake server (fake_server.py) that misbehaves on purpose: an
honest server passes; one that answers a request twice, never answers one, or dies fails with
the matching invariant. Seconds, no model: this runs in make test; the soak itself (make soak)
does not."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HETSOAK = os.environ.get("HETSOAK_BIN") or os.path.join(ROOT, "build", "hetsoak")


def soak(tmp_path, *fake_args):
    out = tmp_path / "out"
    cmd = [HETSOAK, "--requests", "10000", "--capacity-s", "0.4", "--period-s", "4", "--max-s",
           "60", "--concurrency", "16",
           # the fake server is Python: its heap in a 5 s run is not what these tests are about
           # (it grew 16.3 -> 19.7 MiB once, past the default 1.2 bound, on a loaded machine)
           "--rss-growth-max", "2",
           "--out", str(out), "--",
           sys.executable, os.path.join(HERE, "fake_server.py")] + list(fake_args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    with open(out / "summary.json") as f:
        summary = json.load(f)
    assert os.path.exists(out / "summary.txt")
    return p.returncode, summary, p.stdout + p.stderr


def failed(summary):
    return sorted(k for k, v in summary["invariants"].items() if not v["ok"])


def test_an_honest_server_passes(tmp_path):
    rc, s, log = soak(tmp_path)
    assert rc == 0 and s["passed"], log
    assert s["sent"]["total"] >= 10000
    # every kind of client ran, and every request is accounted for
    for mode in ("normal", "slow_body", "cut_mid_body", "abandoned_after_body"):
        assert s["sent"][mode] > 0, mode
    ab = s["abandoned"]
    assert s["answered"]["total"] + ab["cut_mid_body"] + ab["after_body"] == s["sent"]["total"]


def test_a_second_answer_is_caught(tmp_path):
    rc, s, log = soak(tmp_path, "--double-every", "997")
    assert rc == 1 and failed(s) == ["answered_twice"], log
    assert s["answered_twice"]["total"] > 0


def test_a_lost_request_is_caught(tmp_path):
    rc, s, log = soak(tmp_path, "--drop-every", "1009")
    assert rc == 1 and "never_answered" in failed(s), log
    assert s["never_answered"]["total"] > 0


def test_a_dead_server_is_caught(tmp_path):
    rc, s, log = soak(tmp_path, "--die-after", "8000")
    assert rc == 1, log
    for name in ("server_alive", "health_at_end", "exit_0_on_sigterm", "never_answered"):
        assert name in failed(s), (name, failed(s))


def test_loopback_only(tmp_path):
    """A server that says it listens elsewhere is refused before any load."""
    script = tmp_path / "elsewhere.py"
    script.write_text("import time\nprint('listening on http://10.1.2.3:8080', flush=True)\n"
                      "time.sleep(30)\n")
    p = subprocess.run([HETSOAK, "--requests", "10", "--out", str(tmp_path / "o"), "--",
                        sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "loopback only" in p.stderr, p.stderr
