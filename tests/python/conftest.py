"""Shared fixtures of the Python package's tests (run by ctest: tests/python/CMakeLists.txt).

Environment (set by ctest): TAGI_SOURCE_DIR, TAGI_BIN_DIR (build/bin). The
package is imported from python/ (PYTHONPATH), its gRPC modules from
python/tagi_ddp/_proto (the build's target python_stubs).

A run whose every test was skipped exits with 77, which ctest reports as
skipped (SKIP_RETURN_CODE), instead of pytest's 0.

Marker: network, the tests that need the package index (PyPI); they skip,
saying so, where it cannot be reached, and `-m "not network"` leaves them out.
"""
import os

import pytest

SKIPPED_ALL = 77


def source_dir():
    return os.environ.get("TAGI_SOURCE_DIR") or os.path.abspath(
        os.path.join(os.path.dirname(__file__), "..", ".."))


def bin_dir():
    return os.environ.get("TAGI_BIN_DIR") or os.path.join(source_dir(), "build", "bin")


@pytest.fixture
def src():
    return source_dir()


@pytest.fixture
def bindir():
    return bin_dir()


def pytest_configure(config):
    config.addinivalue_line("markers", "network: needs the package index (PyPI); skips "
                            "without it")


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    passed = len(reporter.stats.get("passed", []))
    skipped = len(reporter.stats.get("skipped", []))
    if skipped and not passed:
        session.exitstatus = SKIPPED_ALL
