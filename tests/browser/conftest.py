"""The browser tests share the acceptance suite's real worker and beat processes."""

from tests.acceptance.conftest import cluster  # noqa: F401  (the fixture, re-exported)
