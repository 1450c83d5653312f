"""The pronunciation cache is this user's (issue 25, Why 7): a ``marshal`` file in the user's cache folder, never
the shared temporary folder, and a cache file someone else could have written is never loaded (a planted one once
read 银行 as "sha3 bi1")."""

from __future__ import annotations

import marshal
import os
import tempfile

import pytest

from tts_app.frontend import lexicon

PLANTED = {"format": lexicon.CACHE_FORMAT, "phrases": {"银行": ["sha3", "bi1"]}}
BUILT = {"phrases": {"银行": ["yin2", "hang2"]}}


@pytest.fixture()
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(lexicon, "_build_state", lambda: dict(BUILT))  # the real build takes seconds
    return tmp_path / "cache"


def test_the_cache_lives_in_the_users_cache_folder(cache_home):
    path = lexicon._cache_path()
    assert path.startswith(str(cache_home / "tts_app") + os.sep)
    assert not path.startswith(tempfile.gettempdir() + os.sep) or str(cache_home).startswith(tempfile.gettempdir())
    state = lexicon._load_state()
    assert state["phrases"] == BUILT["phrases"] and os.path.exists(path)
    assert oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == oct(0o700)
    assert lexicon._load_state()["phrases"] == BUILT["phrases"]  # read back from the file


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership")
@pytest.mark.parametrize("how", ["world-writable file", "world-writable folder", "another user's file"])
def test_a_cache_file_someone_else_could_have_written_is_never_loaded(cache_home, how):
    path = lexicon._cache_path()
    os.makedirs(os.path.dirname(path), mode=0o700)
    with open(path, "wb") as f:
        marshal.dump(PLANTED, f)
    if how == "world-writable file":
        os.chmod(path, 0o666)
    elif how == "world-writable folder":
        os.chmod(os.path.dirname(path), 0o777)
    else:
        if os.getuid() != 0:
            pytest.skip("needs root to give the file to another user")
        os.chown(path, 65534, 65534)
    assert lexicon._load_state()["phrases"] == BUILT["phrases"]
