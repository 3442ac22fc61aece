"""Password hashes: the cost is a setting, recorded in each hash; old hashes still verify."""

from __future__ import annotations

import base64
import hashlib
import os
from base64 import b64encode

import pytest

from netbay.identity import passwords
from netbay.identity.passwords import check_password, hash_password


def test_hash_names_its_parameters_and_verifies_at_any_configured_cost(monkeypatch):
    cheap, dear = hash_password("pw", cost=4), hash_password("pw", cost=14)
    assert cheap.startswith("scrypt$ln=4,r=8,p=1$")
    assert dear.count("$") == 2   # the default cost: the older form, which netbays before the setting read
    for configured in ("4", "12"):   # what the server is set to now does not matter to a stored hash
        monkeypatch.setenv(passwords.COST_ENV, configured)
        passwords.hash_cost.cache_clear()
        assert check_password("pw", cheap) and check_password("pw", dear)
        assert not check_password("px", cheap) and not check_password("px", dear)
    passwords.hash_cost.cache_clear()


def test_hash_before_the_setting_verifies_with_the_parameters_of_its_time():
    salt = os.urandom(16)
    digest = hashlib.scrypt(b"old-secret", salt=salt, n=2**14, r=8, p=1)
    old = f"scrypt${b64encode(salt).decode()}${b64encode(digest).decode()}"
    assert check_password("old-secret", old)
    assert not check_password("new-secret", old)
    # and what is written at the default cost is what the code before the setting checked
    _, salt_text, digest_text = hash_password("new-secret", cost=14).split("$")
    assert hashlib.scrypt(b"new-secret", salt=base64.b64decode(salt_text), n=2**14, r=8, p=1) == \
        base64.b64decode(digest_text)


@pytest.mark.parametrize("stored", ["", "x", "scrypt$a$b$c$d", "scrypt$ln=99,r=8,p=1$AAAA$AAAA",
                                    "scrypt$ln=4$AAAA$AAAA", "scrypt$ln=4,r=8,p=1$!!$AAAA", "md5$AAAA$AAAA$AAAA"])
def test_malformed_or_foreign_hash_never_matches(stored):
    assert not check_password("", stored) and not check_password("pw", stored)


def test_cost_setting_default_and_bounds(monkeypatch):
    try:
        monkeypatch.delenv(passwords.COST_ENV, raising=False)
        passwords.hash_cost.cache_clear()
        assert passwords.hash_cost() == passwords.DEFAULT_COST == 14
        monkeypatch.setenv(passwords.COST_ENV, "6")
        passwords.hash_cost.cache_clear()
        assert hash_password("pw").startswith("scrypt$ln=6,")
        for bad in ("0", "21", "fast"):
            monkeypatch.setenv(passwords.COST_ENV, bad)
            passwords.hash_cost.cache_clear()
            with pytest.raises(ValueError, match=passwords.COST_ENV):
                passwords.hash_cost()
    finally:
        passwords.hash_cost.cache_clear()
