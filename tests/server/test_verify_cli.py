# `hetserve verify` as an operator types it: with no arguments it checks every kind x device x
# dtype of this machine and each either passes or is skipped with one line saying why; a kind
# that runs no stage here (remote) is skipped, never run (it used to crash: a NULL method called
# from the executor).
import re
import subprocess

from hetserve_fixture import BINARY, MODEL, ROOT

RESULT = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+\d+\s+[-\d.]+\s+[-\d.]+\s+\S+\s+[\d.]+\s+(PASS|FAIL)")


def verify(*args, timeout=900):
    r = subprocess.run([BINARY, "verify", "--model", MODEL] + list(args), capture_output=True,
                       text=True, timeout=timeout, cwd=ROOT)
    assert r.returncode >= 0, "verify died by signal %d:\n%s%s" % (-r.returncode, r.stdout, r.stderr)
    return r


def test_remote_alone_is_skipped_with_its_reason():
    r = verify("--engine", "remote", "--limit", "4")
    lines = [l for l in r.stdout.splitlines() if l.startswith("remote")]
    assert len(lines) == 1 and "skipped" in lines[0], r.stdout
    assert "runs no stages on this machine" in lines[0] or "not built" in lines[0], lines[0]
    # nothing ran: that is not a pass
    assert r.returncode == 1 and "no engine ran" in r.stdout, r.stdout


def test_cpu_and_remote_together_pass():
    r = verify("--engine", "cpu,remote", "--limit", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verify: all passed" in r.stdout

