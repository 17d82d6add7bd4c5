"""Fixtures shared by the tests, and the `slow` marker (`pytest -m "not slow"` is the
inner loop). Helpers are in helpers.py."""
import numpy as np
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test of several seconds (a killed run, worker "
                                       "processes, a real process boundary); deselect with "
                                       "-m 'not slow'")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
