"""The drafter interface: what the rollout engine (real.engine.generate) asks of a drafter, and the registry of kinds.

A drafter (`Drafting`) is shared across engines and steps; each engine opens one `DraftSession` on it, whose
rows are the engine's running rows, in its order. Per speculative iteration the engine calls, on the session:

1. `catch_up(tokens, features)`: every running row's committed tokens (prompt and output so far), and, when
   the drafter's `features` is "hidden", the target's feature cache (real.engine.kvcache.RaggedCache.features: f_i,
   the target's last hidden state at token i, for every committed token but each row's last), else None.
   The session takes in what it has not seen yet: the tokens the last verification accepted, or, at the
   first speculative iteration after plain ones (the SD switch's re-prefill), every token those emitted
   (the target is not run again: its features were kept from the plain forwards). The first speculative
   iteration of a session (or after `Engine.set_drafter`) sees every token of every row.
2. `draft(roots, positions, strategy)`: a `real.engine.spec.DraftTree` per row for the strategy
   (`depth_topk_verify`, real.engine.spec.draftable): node 0 the root (each row's last committed token, long [B]
   `roots`, at position `positions` [B]), then `verify` draft nodes (a chain where `topk` is 1, or where the
   drafter proposes chains only). Drafts are proposals: the target verifies them with the lossless rule of
   real.engine.sampling, which needs no draft probabilities, so whatever a drafter proposes the output keeps the
   target's distribution (greedy: the same tokens as plain decoding).

and, whatever the mode, `add(prompts)` when the engine admits rows (appended after the running ones) and
`select(keep, done)` when rows leave (`keep`: the indices of the rows that stay, in order; `done`: the
committed tokens, prompt included, of each row that left). A plain iteration calls nothing but these two.

On the drafter: `target_updated()` after the target's weights change (a GRPO update). A drafter that is
trained (spot training and the warm-up in real/run/worker.py, real/drafters/warmup.py) is also `Trainable`.

Adding a drafter: one module with a class that has the attributes and methods of `Drafting` and a
classmethod `build(target, model)` (a drafter for `target`, the known model or directory `model`), and its
line in DRAFTERS (kind name -> "module:Class"). `load` then finds it by its kind name (the `--drafters` of
`tltsim real speed`); docs/architecture.md ("Adding a drafter") says the same.
"""
from __future__ import annotations

import importlib
import zipfile
from pathlib import Path
from typing import Protocol, runtime_checkable

from real.models.hub import KNOWN, known_name
from real.settings import ASSETS, packaged
from tltsim.core.errors import TltsimError

# kind name -> "module:Class"; "eagle" (real.drafters.eagle) is the trained drafter whose checkpoints `load` reads
DRAFTERS = {"eagle": "real.drafters.eagle:Drafter", "suffix": "real.drafters.suffix:SuffixDrafter",
            "hybrid": "real.drafters.hybrid:HybridDrafter", "ngram": "real.drafters.ngram:NgramDrafter"}
CHECKPOINT_FORMAT = "tltsim-drafter-1"  # the `format` of a trained drafter's checkpoint (real.drafters.eagle.save)
SHIPPED = "shipped"  # the trained drafter shipped for a known model (real.models.hub.KNOWN's `drafter`)


class DraftSession(Protocol):
    """A drafter's state over one engine's running rows (see the module docstring)."""

    def add(self, prompts: list[list[int]]) -> None: ...

    def select(self, keep: list[int], done: list[list[int]]) -> None: ...

    def catch_up(self, tokens: list[list[int]], features) -> None: ...

    def draft(self, roots, positions, strategy): ...


@runtime_checkable
class Drafting(Protocol):
    """What the engine asks of a drafter (see the module docstring)."""

    kind: str  # its name in DRAFTERS
    features: str  # target features its sessions read: "hidden" (the last hidden states) or "none"

    def session(self) -> DraftSession:
        """A session with no rows, for one engine."""
        ...

    def target_updated(self) -> None:
        """The target's weights changed: refresh what the drafter copied from them."""
        ...


@runtime_checkable
class Trainable(Drafting, Protocol):
    """A drafter that trains on (tokens long [L], target features [L - 1, H]) pairs, as spot training and the
    warm-up do (real.drafters.eagle.Drafter: a torch module, whose parameters are averaged across workers)."""

    def parameters(self): ...

    def train_step(self, pairs, optimizer) -> float: ...

    def fit(self, pairs, steps: int, batch_size: int = 8, lr: float = 1e-3, seed: int = 0, **kw) -> list[float]: ...

    def save(self, path, dtype=None, meta: dict | None = None) -> None: ...

    def eval(self): ...


def kind(name: str) -> type:
    """The drafter class registered as `name`."""
    if name not in DRAFTERS:
        raise TltsimError(f"drafter kind {name!r}: not one of {', '.join(DRAFTERS)}")
    module, cls = DRAFTERS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def load(name: str | Path, target, model: str | Path | None = None) -> Drafting:
    """The drafter `name` names for `target`: SHIPPED (the trained drafter shipped for the known model `model`),
    a kind name of DRAFTERS (its `build(target, model)`), "hybrid:NAME" (the hybrid over the trained drafter NAME
    names, with a fresh history), or else a path to a trained drafter's checkpoint (`resolve` checks the name)."""
    return _build(resolve(name, model), target, model)


def resolve(name: str | Path, model: str | Path | None = None) -> tuple:
    """What drafter name `name` names for `model`, checked without torch, so a command refuses a bad name before
    it loads anything: ("hybrid", the inner name's resolve), ("checkpoint", its path) for SHIPPED (the drafter
    shipped for `model`) or a trained drafter's checkpoint file (its format checked: check_checkpoint), or
    (kind, None) for a kind of DRAFTERS; TltsimError for anything else."""
    if str(name).startswith("hybrid:"):
        inner = str(name)[len("hybrid:"):]
        if not inner.strip() or inner in ("hybrid", "suffix") or inner.startswith("hybrid:"):
            raise TltsimError(f"drafter {name}: name the trained drafter the hybrid drafts with after 'hybrid:' "
                              f"({SHIPPED} or a checkpoint file)")
        return "hybrid", resolve(inner, model)
    if not str(name).strip():
        raise TltsimError("drafter '': no drafter named; give a kind, a checkpoint file or hybrid:CHECKPOINT")
    if name == SHIPPED:
        return "checkpoint", shipped_drafter(model)
    if str(name) in DRAFTERS:
        return str(name), None
    name = packaged(name)  # a record's "real/assets/..." from another directory
    if not Path(name).exists():
        raise TltsimError(f"drafter {name}: not {SHIPPED}, a kind ({', '.join(DRAFTERS)}) or a checkpoint file")
    check_checkpoint(name)
    return "checkpoint", Path(name)


def _build(resolved: tuple, target, model) -> Drafting:
    how, what = resolved
    if how == "hybrid":
        return kind("hybrid")(_build(what, target, model), kind("suffix")())
    if how == "checkpoint":
        return kind("eagle").load(what, target)
    return kind(how).build(target, model)


def find_shipped_drafter(model: str | Path | None) -> Path | None:
    """The drafter shipped for `model` (a known model's name or its cached directory: real.models.hub.KNOWN's
    `drafter`, in real/assets/, whose README.md says how each was made), or None."""
    known = KNOWN.get(known_name(model)) if model is not None else None
    return ASSETS / known.drafter if known is not None and known.drafter else None


def shipped_drafter(model: str | Path | None) -> Path:
    """The shipped drafter of `model`; TltsimError if none."""
    found = find_shipped_drafter(model)
    if found is None:
        raise TltsimError(f"model {model}: no drafter is shipped for it (shipped for: {', '.join(k for k, m in KNOWN.items() if m.drafter)}); "
                          f"pass --drafter, or warm one up with `tltsim real drafter`")
    return found


def check_checkpoint(path: str | Path) -> None:
    """That `path` is a trained drafter's checkpoint, read without torch (its zip holds a pickle naming
    CHECKPOINT_FORMAT), so a command refuses another file before it starts workers; TltsimError else."""
    path = Path(path)
    if not path.is_file():
        raise TltsimError(f"{path}: {'not a drafter checkpoint but a directory' if path.is_dir() else 'no such file'}; "
                          f"give a drafter checkpoint (`tltsim real drafter -o FILE` writes one)")
    try:
        with zipfile.ZipFile(path) as z:
            found = any(name.endswith("/data.pkl") and CHECKPOINT_FORMAT.encode() in z.read(name)
                        for name in z.namelist())
    except (zipfile.BadZipFile, OSError):
        found = False
    if not found:
        raise TltsimError(f"{path}: not a drafter checkpoint (format {CHECKPOINT_FORMAT}); give one "
                          f"`tltsim real drafter -o FILE` or a run's drafter_init.pt wrote")
