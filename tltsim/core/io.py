"""Atomic output: a result file or directory is either fully written or not there at all.

    with atomic_path("report.html") as tmp: ...       # a file: written to a temporary beside it, renamed over it
    with atomic_dir("out/tlt", sealed("result")) as tmp:  # a directory: built whole in a temporary beside it,
        ...                                          # then swapped in (the old one, if any, goes whole)
    write_manifest(dir, kind="result")               # seal it: every file's size and sha256, written last
    read_manifest(dir)                               # ... checked on read (a flipped bit is an error naming the file)
    check_output(path) / check_apart(outputs, inputs)  # before any work: the target can be written, and is no input
    check_file(path, force)                          # ... a single file: one in the way is replaced only if tltsim
                                                     #     wrote it (`written_by_tltsim`) or `force`

A directory is replaced only when `replaceable` says so; `sealed(kinds)` says it for a directory tltsim sealed
(its top-level manifest, of one of those kinds) that holds nothing its manifest does not list: what a user put
there is never replaced. One writer at a time per target: a second one is refused while the first holds the
lock file `.NAME.lock` beside it (fcntl.flock, released when the writer exits, killed or not; a process it forks,
such as a comparison's pool worker, closes its copy at once, so it never holds the lock past the writer), or waits
for it (`exclusive(path, wait=True)`). Temporaries are named `.NAME.PID[-X].tmp` beside their target; one whose process
is gone (killed) is removed by the next write to the same target. A single-file output is held to the same rule
as a directory: an existing file is replaced only when its content carries tltsim's mark (`written_by_tltsim`),
or the user said `--force`. Every problem with a target a user named (a
file in the way, a directory where a file is wanted, no permission) is a TltsimError naming the path.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from tltsim.core.errors import TltsimError
from tltsim.core.marks import sha256_file, written_by_tltsim

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "tltsim.manifest/2"  # files: name -> {bytes, sha256}; kind: what the directory is
_TEMP = re.compile(r"(\d+)(-[0-9a-f]+)?(\.old)?\.tmp")  # what follows `.NAME.` in a temporary's name


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it over `path`.

    The rename is atomic on POSIX, so readers see the old file or the new one,
    never a half-written one. On an exception the temporary file is removed.
    """
    path = Path(path)
    check_output(path)
    _make_parent(path)
    with exclusive(path):
        _remove_orphans(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            with _user_error(path):
                tmp.touch(0o666)  # the usual permissions of a new file (umask applies)
            yield tmp
            with _user_error(path):
                os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()


@contextmanager
def atomic_dir(path: str | os.PathLike, replaceable: Callable[[Path], bool]) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path`; on success it takes `path`'s place whole.

    An existing `path` is replaced only if `replaceable(path)` says it holds nothing but an earlier result
    (else a TltsimError, before anything is written); the old directory goes whole, so `path` never mixes
    two results. On Linux the swap is one atomic exchange (renameat2); elsewhere the old directory is moved
    aside first, so a kill between the two renames leaves no `path`, never a mixed one.
    On an exception the temporary directory is removed and `path` is left as it was.
    """
    path = Path(path)
    check_output(path, replaceable)
    _make_parent(path)
    with exclusive(path):
        check_output(path, replaceable)  # again, now that no other writer can change it
        _remove_orphans(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)  # this process's own leftover (an earlier call that failed to clean)
        try:
            with _user_error(path):
                tmp.mkdir()
            yield tmp
            with _user_error(path):
                _swap_in(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def check_output(path: str | os.PathLike, replaceable: Callable[[Path], bool] | None = None,
                 what: str = "a tltsim result (a directory tltsim sealed with its manifest.json, holding only the files "
                             "it lists)") -> Path:
    """Check, writing nothing, that `path` can be written: a file (`replaceable` None) or a directory replaced
    whole. A directory where a file is wanted (or a file where a directory is), a file above it, an existing
    directory `replaceable` refuses (it is not `what`), or a place without write permission is a TltsimError
    naming the path."""
    path = Path(path)
    if replaceable is None and path.is_dir():
        raise TltsimError(f"{path}: is a directory; name a file to write")
    if replaceable is not None and path.exists() and not path.is_dir():
        raise TltsimError(f"{path}: is a file, not a directory; name a directory for the result")
    if replaceable is not None and path.is_dir() and not replaceable(path):
        raise TltsimError(f"{path}: exists and is not {what}; it is left as is: remove it or choose another "
                          f"directory")
    for up in path.parents:
        if up.exists() or up.is_symlink():
            if not up.is_dir():
                raise TltsimError(f"{path}: {up} is a file, so nothing can be written under it; choose another path")
            if not os.access(up, os.W_OK | os.X_OK):
                raise TltsimError(f"{path}: cannot write in {up} (no permission); choose another path")
            break
    return path


def check_file(path: str | os.PathLike, force: bool = False,
               ours: Callable[[Path], bool] | None = None) -> Path:
    """`check_output` for a single file a command writes whole (with `atomic_path`), before any work: an existing
    file is replaced only if `force`, or if its content shows tltsim wrote it (`ours`, by default
    `written_by_tltsim`); else a TltsimError naming it, saying to pass --force or choose another path."""
    path = check_output(path)
    if not force and (path.exists() or path.is_symlink()) and not (ours or written_by_tltsim)(path):
        raise TltsimError(f"{path}: exists and is not a file tltsim wrote; it is left as is: pass --force to replace "
                          f"it, or choose another path")
    return path


def check_apart(outputs: dict, inputs: dict) -> None:
    """That no output is one of the inputs, lies inside an input directory, or is a directory holding an input:
    `outputs` and `inputs` map a flag (what the line names) to a path, or None where not given."""
    ins = {flag: Path(p).resolve() for flag, p in inputs.items() if p is not None and Path(p).exists()}
    for oflag, o in outputs.items():
        if o is None:
            continue
        out = Path(o).resolve()
        for iflag, i in ins.items():
            if out == i:
                raise TltsimError(f"{oflag} {o}: is also {iflag}; a command never writes over its own input: "
                                  f"choose another path")
            if i.is_dir() and i in out.parents:
                raise TltsimError(f"{oflag} {o}: lies inside {iflag} {inputs[iflag]}; a command never writes into "
                                  f"its own input: choose a path outside it")
            if out in i.parents:
                raise TltsimError(f"{oflag} {o}: holds {iflag} {inputs[iflag]}, which writing it would replace; "
                                  f"choose another path")


_HELD: set[int] = set()  # the descriptors of the locks this process holds


def _drop_held() -> None:
    """In a forked child: close the copies of the parent's lock descriptors, so that a child left behind by a killed
    writer (a pool worker still running) does not keep the target locked."""
    for fd in _HELD:
        os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_held)


@contextmanager
def exclusive(path: str | os.PathLike, wait: bool = False) -> Iterator[None]:
    """Hold the lock of target `path` (the file `.NAME.lock` beside it, created in an existing directory) while
    writing it. Held by another process: wait for it (`wait`), else a TltsimError saying that this writer lost."""
    path = Path(path)
    lock = path.with_name(f".{path.name}.lock")
    while True:
        with _user_error(path):
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise TltsimError(f"{path}: another tltsim (pid {holder or '?'}) is writing it now; this one stops and "
                              f"writes nothing: wait for that one to finish, or choose another path") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino  # not a lock file its last holder removed meanwhile
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    _HELD.add(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        lock.unlink(missing_ok=True)
        _HELD.discard(fd)
        os.close(fd)


def sealed(*kinds: str) -> Callable[[Path], bool]:
    """A `replaceable` for `atomic_dir`: an empty directory, or one whose manifest (of one of `kinds`) lists every
    file it holds (besides tltsim's temporaries and locks)."""
    def replaceable(path: Path) -> bool:
        listed = _listed(path, kinds)
        return listed is not None and all(f.relative_to(path).as_posix() in listed for f in _files(path))
    return replaceable


def _listed(path: Path, kinds) -> set[str] | None:
    """The names `path`'s manifest lists (with the manifest), if it is one of `kinds`; an empty set for an
    empty directory; None otherwise."""
    if not any(path.iterdir()):
        return set()
    try:
        m = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        ok = m.get("format") == MANIFEST_FORMAT and m.get("kind") in kinds and isinstance(m["files"], dict)
    except (OSError, ValueError, AttributeError, KeyError, RecursionError):
        return None
    return {*m["files"], MANIFEST} if ok else None


def _files(directory: Path) -> list[Path]:
    """Every file under `directory` (symlinks too, as files), not tltsim's temporaries and locks."""
    out = []
    for entry in sorted(directory.iterdir()):
        if is_temporary(entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            out += _files(entry)
        else:
            out.append(entry)
    return out


def _swap_in(new: Path, path: Path) -> None:
    """Move directory `new` to `path`; an existing `path` is exchanged with it and then lies at `new`."""
    if not path.exists():
        os.rename(new, path)
        return
    if _exchange(new, path):
        return
    old = path.with_name(f".{path.name}.{os.getpid()}.old.tmp")
    os.rename(path, old)
    os.rename(new, path)
    os.rename(old, new)  # removed with the temporary


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux renameat2 RENAME_EXCHANGE); False where the system has no such call."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):  # no such call, or a file system without exchange
        return False
    raise OSError(err, os.strerror(err), str(b))


def _make_parent(path: Path) -> None:
    """Create `path`'s parent directories (`check_output` has checked that nothing is in the way)."""
    with _user_error(path):
        path.parent.mkdir(parents=True, exist_ok=True)


@contextmanager
def _user_error(path: Path):
    """OS errors a user can fix (permissions, a full disk, a read-only file system) as a TltsimError."""
    try:
        yield
    except OSError as e:
        raise TltsimError(f"{path}: cannot write ({e.strerror or e}); check the path and its permissions") from None


def _remove_orphans(path: Path) -> None:
    """Remove temporaries of `path` left by processes that no longer run (a killed write)."""
    prefix = f".{path.name}."
    try:
        entries = list(path.parent.iterdir())
    except OSError:
        return
    for p in entries:
        m = _TEMP.fullmatch(p.name[len(prefix):]) if p.name.startswith(prefix) else None
        if m and not _alive(int(m.group(1))):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


def is_temporary(name: str) -> bool:
    """Whether `name` is that of a temporary or a lock file `atomic_path` or `atomic_dir` makes."""
    return re.fullmatch(r"\..+\.(" + _TEMP.pattern + "|lock)", name) is not None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def write_manifest(directory: str | os.PathLike, names=None, kind: str = "result") -> None:
    """Seal `directory`: write its manifest, the size and sha256 of each file of `names` (paths relative to it;
    None: every file under it) and what it is (`kind`). Write it last: it marks the files complete."""
    directory = Path(directory)
    names = [f.relative_to(directory).as_posix() for f in _files(directory)] if names is None else names
    files = {n: {"bytes": (directory / n).stat().st_size, "sha256": sha256_file(directory / n)}
             for n in names if n != MANIFEST}
    write_json(directory / MANIFEST, {"format": MANIFEST_FORMAT, "kind": kind, "files": files})


def manifest_kind(directory: str | os.PathLike) -> str | None:
    """The kind `directory`'s manifest gives, or None (no manifest, or not one this tltsim reads)."""
    try:
        m = json.loads((Path(directory) / MANIFEST).read_text(encoding="utf-8"))
        return m["kind"] if m.get("format") == MANIFEST_FORMAT and isinstance(m["kind"], str) else None
    except (OSError, ValueError, AttributeError, KeyError, TypeError, RecursionError):
        return None


def read_manifest(directory: str | os.PathLike, what: str = "result", digests: bool = True) -> list[str]:
    """The files `directory`'s manifest lists, after checking each is there with its recorded size and (`digests`)
    sha256.

    A missing or unreadable manifest, a missing file or one of another size or content (truncated, a flipped
    bit, or rewritten by a later run) is a TltsimError saying which.
    """
    directory = Path(directory)
    hint = "write it again"
    if not directory.is_dir():
        raise TltsimError(f"{directory}: {'is not a directory' if directory.exists() else 'does not exist'}; "
                          f"give a {what} directory")
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        old = "format" not in manifest and isinstance(manifest.get("files"), dict)
        if old or manifest["format"] != MANIFEST_FORMAT:
            raise TltsimError(f"{directory}: its {MANIFEST} is of another tltsim version (no sha256 per file, or "
                              f"a newer format); {hint} with this one")
        files = {str(n): (int(f["bytes"]), str(f["sha256"])) for n, f in manifest["files"].items()}
    except FileNotFoundError:
        raise TltsimError(f"{directory}: not a complete {what} (no {MANIFEST}: unfinished, or not a {what}); "
                          f"{hint}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise TltsimError(f"{directory}: {MANIFEST} is damaged; {hint}") from None
    for name, (size, digest) in files.items():
        f = directory / name
        if ".." in Path(name).parts or Path(name).is_absolute():
            raise TltsimError(f"{directory}: {MANIFEST} names {name!r}, outside the directory; it is damaged")
        if not f.is_file():
            raise TltsimError(f"{directory}: {name} is missing (the {MANIFEST} lists it); {hint}")
        if f.stat().st_size != size:
            raise TltsimError(f"{directory}: {name} has {f.stat().st_size} bytes, the {MANIFEST} says {size} "
                              f"(damaged, or from another run); {hint}")
        if digests and sha256_file(f) != digest:
            raise TltsimError(f"{directory}: {name} is damaged (its sha256 is not the one in {MANIFEST}: "
                              f"changed since it was written); {hint}")
    return list(files)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


def _jsonable(x):
    # numpy scalars and arrays, Paths
    if hasattr(x, "item") and callable(x.item) and getattr(x, "ndim", 1) == 0:
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)
