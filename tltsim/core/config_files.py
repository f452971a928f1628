"""Config files a person wrote or a tool saved (TOML, verl's YAML): read whole, bounded in size, and every problem
a TltsimError naming the file."""
from __future__ import annotations

import os
from pathlib import Path

from tltsim.core.errors import TltsimError

MAX_CONFIG_BYTES = 1 << 22  # a config file (TOML, YAML) of more than 4 MiB is not one a person wrote or verl saved


def read_config(path: str | os.PathLike, what: str = "file") -> bytes:
    """The bytes of config file `path`; a missing file, or one over MAX_CONFIG_BYTES, is a TltsimError naming it."""
    path = Path(path)
    if not path.is_file():
        raise TltsimError(f"{path}: {what} not found" + (" (it is a directory)" if path.is_dir() else ""))
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise TltsimError(f"{path}: {path.stat().st_size:,} bytes, more than the {MAX_CONFIG_BYTES:,} a {what} may "
                          f"have; is it the right file?")
    try:
        return path.read_bytes()
    except OSError as e:
        raise TltsimError(f"{path}: cannot read the {what} ({e.strerror or e})") from None


def read_toml(path: str | os.PathLike, what: str = "file") -> dict:
    """Parse a TOML file; a missing or oversized file, text that is not UTF-8 or bad TOML is a TltsimError naming
    the file."""
    return parse_toml(read_config(path, what), str(path))


def parse_toml(data: bytes, origin: str) -> dict:
    """Parse TOML bytes read from `origin`; text that is not UTF-8 or bad TOML is a TltsimError naming it."""
    import tomllib

    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise TltsimError(f"{origin}: not UTF-8 text (byte {e.start}); save the TOML file as UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise TltsimError(f"{origin}: not valid TOML ({e})") from None
