"""Token counts of texts with the tokenizer of the run's model (for logs that keep texts, not token ids).

    token_counter("path/to/model") -> count(texts) -> [len(tokenizer(t, add_special_tokens=False).input_ids), ...]

The tokenizer is any local directory `transformers.AutoTokenizer.from_pretrained` reads (a model
checkpoint, or a tokenizer saved with `save_pretrained`). Loading one needs transformers (the `real`
extra) but not torch: transformers runs its tokenizers without a deep-learning framework.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from tltsim.core.errors import TltsimError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def tokenizer_dir(name: str) -> Path:
    """The local directory the `--tokenizer` argument names.

    A path (`~` expanded); the command line turns a known model's name into its cached directory
    (real.models.hub.resolve_model) before it gets here. Raises TltsimError when it names nothing usable."""
    path = Path(name).expanduser()
    if not path.is_dir():
        what = "is a file, not a directory" if path.exists() else "does not exist"
        raise TltsimError(f"--tokenizer {name}: {what}; give the local directory of the run's model or tokenizer "
                          f"(the one with {TOKENIZER_FILES[0]} or {TOKENIZER_FILES[1]})")
    if not any((path / f).exists() for f in TOKENIZER_FILES):
        raise TltsimError(f"--tokenizer {name}: no tokenizer files in it (none of {', '.join(TOKENIZER_FILES)}); "
                          f"give the directory of the model the run trained")
    return path


def token_counter(name: str) -> Callable[[list[str]], list[int]]:
    """A function from texts to their token counts under the tokenizer `name` names (special tokens not added)."""
    path = tokenizer_dir(name)
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise TltsimError("counting tokens needs the transformers package; install it with "
                          "`pip install 'tltsim[real]'` (torch is not needed for tokenizers)") from None
    try:
        tok = AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise TltsimError(f"--tokenizer {name}: transformers cannot load a tokenizer from it ({first}); "
                          f"give the directory of the model the run trained") from None

    def count(texts: list[str]) -> list[int]:
        if not texts:
            return []
        return [len(ids) for ids in tok(list(texts), add_special_tokens=False)["input_ids"]]

    return count
