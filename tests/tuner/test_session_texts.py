"""What a `tune run` session stores and says, from its options and counts (no tuning)."""

from __future__ import annotations

from tuner.options import RunOptions
from tuner.session import session_arguments


def test_stored_arguments_mask_every_credential_of_the_url():
    url = "postgresql+psycopg://u:USERPW@h/db?password=SECRETPW&sslpassword=KEYPW&application_name=tune"
    stored = session_arguments(RunOptions(model="qwen3-tiny", db=url))
    assert not any(secret in str(stored) for secret in ("USERPW", "SECRETPW", "KEYPW"))
    assert stored["db"].startswith("postgresql+psycopg://u:***@h/db?") and "application_name=tune" in stored["db"]
    assert session_arguments(RunOptions(model="qwen3-tiny"))["db"] is None
