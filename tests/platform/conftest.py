"""The platform tests' shared fixtures: a real primary and its synchronous standby."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.failover import PairTemplate, ServerPair
from tests.support.postgres import TEST_DATABASE_URL_VARIABLE


@pytest.fixture(scope="session")
def pair_template() -> Iterator[PairTemplate]:
    """A migrated primary's files, copied for each test's pair (made once per test process,
    the first time a test needs a pair)."""
    if os.environ.get(TEST_DATABASE_URL_VARIABLE):
        pytest.skip("the pair is made from the embedded server's binaries")
    template = PairTemplate()
    try:
        template.create()
        yield template
    finally:
        template.remove()


@pytest.fixture
def pair(pair_template: PairTemplate) -> Iterator[ServerPair]:
    """A primary and its synchronous standby of this test alone."""
    pair = ServerPair(pair_template)
    try:
        pair.create()
        yield pair
    finally:
        pair.remove()
