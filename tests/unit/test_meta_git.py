"""meta.json's git_commit: the checkout's commit, or None (absent) outside one, never git's error."""

import re

from migrate.core import meta


def test_git_commit_of_this_checkout_is_a_commit():
    c = meta.git_commit()
    assert c is None or re.fullmatch(r"[0-9a-f]{40}(-dirty)?", c), c


def test_git_commit_outside_a_checkout_is_absent_not_gits_error(tmp_path, monkeypatch):
    monkeypatch.setattr(meta, "REPO", tmp_path)
    assert meta.git_commit() is None
