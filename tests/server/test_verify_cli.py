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


def test_no_arguments_every_line_passes_or_says_why_it_skipped():
    r = verify("--limit", "8")
    assert r.returncode == 0, r.stdout + r.stderr
    body = r.stdout.splitlines()[2:-1]  # between the header and the verdict
    assert body, r.stdout
    for line in body:
        m = RESULT.match(line)
        if m:
            assert m.group(4) == "PASS", line
        else:
            assert "skipped: " in line and line.split("skipped: ", 1)[1].strip(), line
    assert any(RESULT.match(l) and l.split()[1] == "cpu" for l in body), r.stdout
    assert r.stdout.splitlines()[-1] == "verify: all passed"


def device_claims():
    """`hetserve devices`: each present device's dtypes, and each kind's."""
    import json
    d = json.loads(subprocess.run([BINARY, "devices"], capture_output=True, text=True,
                                  check=True).stdout)
    return d["kinds"], d["engines"]


def test_devices_and_verify_read_the_same_per_device_claims():
    kinds, engines = device_claims()
    r = verify("--limit", "4", "--dtype", "f32")
    assert r.returncode == 0, r.stdout + r.stderr
    r = verify("--limit", "4")
    for e in engines:
        if not e["stages"]:
            continue
        kind = next(k for k in kinds if k["kind"] == e["kind"])
        assert set(e["dtypes"]) <= set(kind["dtypes"]), (e, kind)
        for dt in kind["dtypes"]:
            line = [l for l in r.stdout.splitlines() if l.split()[:1] == [e["name"]] and
                    len(l.split()) > 2 and l.split()[2] == dt]
            assert len(line) == 1, (e["name"], dt, r.stdout)
            if dt in e["dtypes"]:
                assert "does not compute in" not in line[0], line[0]
            else:
                assert "skipped: this device" in line[0] and "does not compute in " + dt in line[0]


def test_a_lane_its_device_cannot_run_is_refused_at_load_naming_it(tmp_path):
    kinds, engines = device_claims()
    lacking = [(e, dt) for e in engines if e["stages"]
               for k in kinds if k["kind"] == e["kind"] for dt in k["dtypes"]
               if dt not in e["dtypes"] and dt in ("f32", "f16", "bf16")]
    if not lacking:
        import pytest
        pytest.skip("every device here computes in every dtype its kind offers")
    e, dt = lacking[0]
    device = int(e["name"][len(e["kind"]):])
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engines:\n  - {name: lane, kind: %s, device: %d, dtype: %s}\n"
                   "models:\n  - {path: \"%s\", name: mini}\n" % (e["kind"], device, dt, MODEL))
    r = subprocess.run([BINARY, "config", "--check", str(cfg)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr  # the file is valid: another machine's device may run it
    assert "on this machine serve refuses it" in r.stderr and "engine 'lane'" in r.stderr, r.stderr
    r = subprocess.run([BINARY, "serve", "--config", str(cfg), "--port", "0"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "model 'mini' on engine 'lane'" in r.stderr and "computes in %s" % dt in r.stderr, r.stderr
    assert e["device"] in r.stderr, r.stderr
