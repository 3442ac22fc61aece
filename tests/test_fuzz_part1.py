"""Fuzzing, part 1 of the schema's operations (``tests/fuzzhelp.py``): no request,
valid or not, may make the server answer 5xx."""

from __future__ import annotations

import pytest
from conftest import Server
from fuzzhelp import fuzz_operations, seeds, token  # noqa: F401 - fixtures


@pytest.mark.slow
def test_openapi_operations_never_answer_5xx(server: Server, token: str, seeds: dict[str, list[str]]) -> None:
    fuzz_operations(server, token, seeds, part=1)
