"""Every file verify writes (model files, dumps, sweep tables, reports, figures, certificates) is
new and whole: it never overwrites a file (unless the user asks, `force`: --force), and it appears
under its name only once it is complete.

`new_file` writes to a hidden temporary file in the same directory and links it to its name at the
end (a hard link is atomic and fails if the name exists; on a file system without hard links, a
rename after a check).  An interruption (Ctrl-C, SIGTERM, an error) removes the temporary file, so a
run stopped while writing leaves nothing that blocks the same command run again.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import IO, Iterator

from .errors import InputError


def exists_error(path: Path) -> InputError:
    return InputError(f"{path} exists; refusing to overwrite it (--force replaces it)")


def check_new(path: str | Path, force: bool = False) -> None:
    """InputError when `path` exists (with `force`: when it is a directory, which is never replaced)."""
    path = Path(path)
    if os.path.isdir(path) if force else os.path.lexists(path):
        raise InputError(f"{path} is a directory") if force else exists_error(path)


@contextlib.contextmanager
def new_file(path: str | Path, binary: bool = False, force: bool = False) -> Iterator[IO]:
    """A handle to write the new file `path` through.  The name is checked (it must not exist, unless
    `force`: then it is replaced, atomically, when the new file is whole; its directory must be
    writable) when the block starts, before a long run fills it; the file appears when the block
    ends without an exception."""
    path = Path(path)
    check_new(path, force)
    while True:
        part = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
        try:  # mode 0o666 less the umask, as the file would have had
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
        except FileNotFoundError:
            raise InputError(f"cannot create {path}: the directory {path.parent} does not exist "
                             f"(create it first)") from None
        except OSError as exc:
            raise InputError(f"cannot create {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if force:
            os.replace(part, path)
        else:
            _publish(part, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)


def _publish(part: Path, path: Path) -> None:
    try:
        os.link(part, path)
    except FileExistsError:
        raise exists_error(path) from None
    except OSError:  # no hard links here
        if os.path.lexists(path):
            raise exists_error(path) from None
        os.replace(part, path)
