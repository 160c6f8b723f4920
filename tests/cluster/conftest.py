import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import BINARY, MODEL  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if not os.path.exists(BINARY) or not os.path.isdir(MODEL):
        skip = pytest.mark.skip(reason="needs %s and the model at %s" % (BINARY, MODEL))
        for it in items:
            it.add_marker(skip)
