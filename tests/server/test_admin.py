# Black-box tests of the admin endpoint's guards: admin.enabled, loopback (every test client is
# loopback), admin.token / HS_ADMIN_TOKEN as `Authorization: Bearer <token>`, and a body whose
# fields have the wrong type refused with 400 rather than ignored.
import pytest

from hetserve_fixture import Server

ADMIN = """
engines:
  - name: cpu0
    kind: cpu
    threads: 1
admin:
  enabled: true
"""
TOKEN = "s3cret-token"


def check_error(status, body, want_status, want_in):
    assert status == want_status, body
    assert want_in in body["error"]["message"], body


def post_fault(server, body, token=None, authorization=None):
    headers = {}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    if authorization is not None:
        headers["Authorization"] = authorization
    return server.post("/admin/fault", body, headers=headers)


@pytest.fixture(scope="module")
def token_server():
    s = Server(ADMIN + '  token: "%s"\n' % TOKEN, env={"HS_ADMIN_TOKEN": ""})
    yield s
    s.stop()


def test_token_is_required(token_server):
    body = {"engine": "cpu0"}
    for kw in ({}, {"token": "wrong"}, {"token": TOKEN[:-1]}, {"token": TOKEN + "x"},
               {"token": ""}, {"authorization": "Basic " + TOKEN}, {"authorization": TOKEN}):
        st, h, b = post_fault(token_server, body, **kw)
        check_error(st, b, 401, "Authorization: Bearer")
        assert h["www-authenticate"] == "Bearer"
        assert b["error"]["type"] == "authentication_error"
    st, _, b = post_fault(token_server, {"engine": "cpu0", "fail_next": 0}, token=TOKEN)
    assert st == 200, b
    assert b == {"engine": "cpu0", "fail_next": 0, "slow_factor": 0, "hang_ms": 0}
    st, _, b = post_fault(token_server, body, authorization="bearer  " + TOKEN)
    assert st == 200, b  # the scheme is case-insensitive


def test_token_checked_before_the_body(token_server):
    st, _, b = token_server.request("POST", "/admin/fault", body="{not json",
                                    headers={"Authorization": "Bearer nope"})
    assert st == 401


def test_environment_token_replaces_the_file_token():
    s = Server(ADMIN + '  token: "from-file"\n', env={"HS_ADMIN_TOKEN": "from-env"})
    try:
        st, _, b = post_fault(s, {"engine": "cpu0"}, token="from-file")
        check_error(st, b, 401, "Bearer")
        st, _, b = post_fault(s, {"engine": "cpu0"})
        check_error(st, b, 401, "Bearer")
        st, _, b = post_fault(s, {"engine": "cpu0"}, token="from-env")
        assert st == 200, b
    finally:
        s.stop()


def test_no_token_configured_needs_no_header():
    s = Server(ADMIN, env={"HS_ADMIN_TOKEN": ""})  # empty: no token
    try:
        st, _, b = post_fault(s, {"engine": "cpu0", "hang_ms": 0})
        assert st == 200, b
        bad = [
            ({"engine": "cpu0", "fail_next": "3"}, "integers"),
            ({"engine": "cpu0", "fail_next": 1.5}, "integers"),
            ({"engine": "cpu0", "fail_next": None}, "integers"),
            ({"engine": "cpu0", "fail_next": True}, "integers"),
            ({"engine": "cpu0", "fail_next": -1}, "integers"),
            ({"engine": "cpu0", "fail_next": 2 ** 40}, "integers"),
            ({"engine": "cpu0", "hang_ms": "10"}, "integers"),
            ({"engine": "cpu0", "slow_factor": "2"}, "slow_factor"),
            ({"engine": "cpu0", "slow_factor": 1001}, "slow_factor"),
            ({"engine": 0}, "'engine' must be a string"),
            ({"engine": "cpu0", "fail-next": 3}, "unknown field 'fail-next'"),
        ]
        for body, frag in bad:
            st, _, b = post_fault(s, body)
            check_error(st, b, 400, frag)
        st, _, b = post_fault(s, {"engine": "gpu7"})
        check_error(st, b, 404, "configured engine")
        st, _, b = post_fault(s, {"engine": "cpu0", "slow_factor": 2, "fail_next": 1})
        assert st == 200 and b["slow_factor"] == 2 and b["fail_next"] == 1, b
        st, _, b = post_fault(s, {"engine": "cpu0"})  # absent fields: no fault
        assert st == 200 and b["fail_next"] == 0, b
        st, _, b = s.post("/v1/embeddings", {"input": "still serving"})
        assert st == 200, b
    finally:
        s.stop()
