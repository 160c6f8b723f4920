import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hetserve_fixture import BINARY, MODEL, Server  # noqa: E402

# Limits small enough that the bad-input cases stay cheap to send.
API_CONFIG = """
engines:
  - name: cpu0
    kind: cpu
    threads: 2
limits:
  timeout_ms: 300000
  body_bytes_max: 65536
  items_max: 64
  chars_max: 2000
scheduler:
  wait_max_ms: 0  # bursts of concurrent clients on a slow machine must not be refused early
"""


def pytest_collection_modifyitems(config, items):
    if not os.path.exists(BINARY) or not os.path.isdir(MODEL):
        skip = pytest.mark.skip(reason="needs %s and the model at %s" % (BINARY, MODEL))
        for it in items:
            it.add_marker(skip)


@pytest.fixture(scope="session")
def server():
    s = Server(API_CONFIG)
    yield s
    s.stop()
