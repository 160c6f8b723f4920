# The OpenMP wait policy a server runs with (src/core/threads.h): hetserve re-executes itself
# once with GOMP_SPINCOUNT=1000 and OMP_WAIT_POLICY=active (the bounded spin, not cut to
# libgomp's throttled 100 pauses when several lanes' teams outnumber the CPUs), unless the user
# set either variable or HS_OMP_KEEP_POLICY=1. Read back from the running server's environment.
import os
import subprocess

import pytest

from hetserve_fixture import BINARY, MODEL

POLICY_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "HS_OMP_KEEP_POLICY")


def served_env(extra):
    """Starts `hetserve serve` with the policy variables of the caller's environment removed and
    `extra` added; returns the policy variables of the server process once it listens."""
    env = {k: v for k, v in os.environ.items() if k not in POLICY_VARS}
    env.update(extra)
    p = subprocess.Popen([BINARY, "serve", "--host", "127.0.0.1", "--port", "0", "--model", MODEL],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = p.stdout.readline()
        assert "listening on" in line, "hetserve did not start: %r\n%s" % (line, p.stderr.read())
        with open("/proc/%d/environ" % p.pid, "rb") as f:
            pairs = [kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv]
        return {k.decode(): v.decode() for k, v in pairs if k.decode() in POLICY_VARS}
    finally:
        p.terminate()
        p.wait(timeout=60)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_default_policy_is_bounded_spin_also_when_throttled():
    assert served_env({}) == {"GOMP_SPINCOUNT": "1000", "OMP_WAIT_POLICY": "active"}


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
@pytest.mark.parametrize("user", [{"GOMP_SPINCOUNT": "50"}, {"OMP_WAIT_POLICY": "passive"},
                                  {"HS_OMP_KEEP_POLICY": "1"}])
def test_users_policy_is_kept(user):
    assert served_env(user) == user
