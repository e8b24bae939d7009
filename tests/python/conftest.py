"""pytest configuration for the Python package's tests: the C++ CLI for byte comparisons, and spawned
gloo process groups that run many checks per spawn (starting torch costs seconds per process)."""

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def gradcomp_cli() -> pathlib.Path:
    """The gradcomp command line of the build the test command made (GRADCOMP_CLI overrides)."""
    path = pathlib.Path(os.environ.get("GRADCOMP_CLI", REPO / "build-ci" / "experiments" / "gradcomp"))
    if not path.is_file():
        pytest.fail(f"the gradcomp CLI is not built at {path}: run ./scripts/run-tests, or set GRADCOMP_CLI")
    return path
