"""Atomic output: a result file or directory is either fully written or not there at all.

    with atomic_path("report.html") as tmp: ...       # a file: written to a temporary beside it, renamed over it
    with atomic_dir("out/tlt", replaceable) as tmp:  # a directory: built whole in a temporary beside it, then
        ...                                          # swapped in (the old one, if any, goes whole)
    write_manifest(dir, names) / read_manifest(dir)  # the list of a directory's files, written last, checked on read

Temporaries are named `.NAME.PID[-X].tmp` beside their target; one whose process is gone (killed) is removed by
the next write to the same target. Every problem with a target a user named (a file in the way, a directory
where a file is wanted, no permission) is a TltsimError naming the path.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from tltsim.errors import TltsimError

MANIFEST = "manifest.json"
_TEMP = re.compile(r"(\d+)(-[0-9a-f]+)?(\.old)?\.tmp")  # what follows `.NAME.` in a temporary's name


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it over `path`.

    The rename is atomic on POSIX, so readers see the old file or the new one,
    never a half-written one. On an exception the temporary file is removed.
    """
    path = Path(path)
    if path.is_dir():
        raise TltsimError(f"{path}: is a directory; name a file to write")
    _make_parent(path)
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
    if path.exists() and not path.is_dir():
        raise TltsimError(f"{path}: is a file, not a directory; name a directory for the result")
    if path.is_dir() and not replaceable(path):
        raise TltsimError(f"{path}: exists and holds files that are not a tltsim result; "
                          f"it is left as is: remove it or choose another directory")
    _make_parent(path)
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
    """Create `path`'s parent directories; a file in the way is a TltsimError naming it."""
    for up in path.parents:
        if up.exists():
            if not up.is_dir():
                raise TltsimError(f"{path}: {up} is a file, so nothing can be written under it; choose another path")
            break
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
    """Whether `name` is that of a temporary `atomic_path` or `atomic_dir` makes."""
    return re.fullmatch(r"\..+\." + _TEMP.pattern, name) is not None


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


def write_manifest(directory: str | os.PathLike, names) -> None:
    """Write the manifest of `directory`: the files `names` and their sizes. Write it last: it marks them complete."""
    directory = Path(directory)
    files = {n: (directory / n).stat().st_size for n in names}
    write_json(directory / MANIFEST, {"files": files})


def read_manifest(directory: str | os.PathLike, what: str = "result") -> list[str]:
    """The files `directory`'s manifest lists, after checking each is there with its recorded size.

    A missing or unreadable manifest, a missing file or one of another size (truncated, or rewritten by a
    later run) is a TltsimError saying which.
    """
    directory = Path(directory)
    hint = "write it again"
    if not directory.is_dir():
        raise TltsimError(f"{directory}: {'is not a directory' if directory.exists() else 'does not exist'}; "
                          f"give a {what} directory")
    try:
        files = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))["files"]
        sizes = {str(n): int(s) for n, s in files.items()}
    except FileNotFoundError:
        raise TltsimError(f"{directory}: not a complete {what} (no {MANIFEST}: unfinished, or not a {what}); "
                          f"{hint}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise TltsimError(f"{directory}: {MANIFEST} is damaged; {hint}") from None
    for name, size in sizes.items():
        f = directory / name
        if not f.is_file():
            raise TltsimError(f"{directory}: {name} is missing (the {MANIFEST} lists it); {hint}")
        if f.stat().st_size != size:
            raise TltsimError(f"{directory}: {name} has {f.stat().st_size} bytes, the {MANIFEST} says {size} "
                              f"(damaged, or from another run); {hint}")
    return list(sizes)


def read_toml(path: str | os.PathLike, what: str = "file") -> dict:
    """Parse a TOML file; a missing file, text that is not UTF-8 or bad TOML is a TltsimError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise TltsimError(f"{path}: {what} not found")
    return parse_toml(path.read_bytes(), str(path))


def parse_toml(data: bytes, origin: str) -> dict:
    """Parse TOML bytes read from `origin`; text that is not UTF-8 or bad TOML is a TltsimError naming it."""
    import tomllib

    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise TltsimError(f"{origin}: not UTF-8 text (byte {e.start}); save the TOML file as UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise TltsimError(f"{origin}: not valid TOML ({e})") from None


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
