"""Every test runs in this process (or its children) unless it asks for a cluster, and with a
verdict cache of its own: no test reads what another wrote, or the user's cache."""

import pytest


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("VERIFY_SCHEDULER", "serial")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
