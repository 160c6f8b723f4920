import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("HETSERVE_BIN") or os.path.join(ROOT, "build", "hetserve")
MODEL = os.environ.get("HS_MODEL_DIR") or os.path.join(ROOT, "models", "all-MiniLM-L6-v2")


def pytest_collection_modifyitems(config, items):
    if not os.path.exists(BINARY) or not os.path.isdir(MODEL):
        skip = pytest.mark.skip(reason="needs %s and the model at %s" % (BINARY, MODEL))
        for it in items:
            it.add_marker(skip)
