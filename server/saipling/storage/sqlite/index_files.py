"""The files saipling writes or locks under `.saipling/`, opened without following links (issue 30), and why
one of them cannot be written (a full disk is not a read-only index).

A cloned vault can carry `.saipling` as a link to a folder elsewhere, or `index.lock`, `index.db` or SQLite's
side files (`-wal`, `-shm`, `-journal`) as links or hard links to other files: writing through them would
truncate, rewrite or rename files outside the project. Each is refused with a message naming it
(IndexPathUnsafe), whatever the command; nothing is created, truncated, renamed or written outside the root.

How: the folder is opened once as a directory descriptor (`O_DIRECTORY | O_NOFOLLOW`) and our own files are
opened, created and renamed relative to it (`O_NOFOLLOW`, `dir_fd`), so a folder swapped for a link after the
check cannot redirect them. SQLite opens the database by a path with no link anywhere on it, with
`SQLITE_OPEN_NOFOLLOW` (it refuses a link at any component), and opens its side files with `O_NOFOLLOW` itself;
hard links are refused by their link count before opening. `config.toml` is only read, never written: it may be
a link (a shared configuration).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import IndexPathUnsafe

if TYPE_CHECKING:
    from ...config.settings import Settings

log = logging.getLogger(__name__)

SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
LOCK_FILE = "index.lock"
GITIGNORE = ".gitignore"
# every file of ours is opened with these (NONBLOCK: a FIFO put in the folder never blocks the open)
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _link_target(path: Path | str, name: str | None = None, dir_fd: int | None = None) -> str:
    try:
        return os.readlink(name if name is not None else path, dir_fd=dir_fd)
    except OSError:
        return "?"


def refuse(path: Path, st: os.stat_result, target: str = "?", *, folder: bool = False) -> None:
    """Raise IndexPathUnsafe when `st` (an lstat of `path`) is a link, a hard link or the wrong kind of entry."""
    if stat.S_ISLNK(st.st_mode):
        raise IndexPathUnsafe(path, f"is a symbolic link (to {target})")
    if folder:
        if not stat.S_ISDIR(st.st_mode):
            raise IndexPathUnsafe(path, "is not a folder")
        return
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        names = f"one of {st.st_nlink} names of the same file, which may be outside the project"
        raise IndexPathUnsafe(path, f"is a hard link ({names})")


def check_entry(folder: Path, name: str, dir_fd: int, *, regular: bool = True) -> os.stat_result | None:
    """lstat `name` in the folder; None when absent. A link or hard link raises; so does another kind of entry
    when `regular` (a folder where `index.db` should be is the caller's to move aside: regular=False)."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    path = folder / name
    refuse(path, st, _link_target(path, name, dir_fd))
    if regular and not stat.S_ISREG(st.st_mode):
        raise IndexPathUnsafe(path, "is not a regular file")
    return st


@contextlib.contextmanager
def open_folder(folder: Path, *, create: bool) -> Iterator[int | None]:
    """The index folder as a directory descriptor (never through a link), created (0o755) when `create` and
    missing; None when missing and not `create`."""
    folder = Path(folder)
    if create:
        folder.parent.mkdir(parents=True, exist_ok=True)  # (the project root: the user's choice of place)
        with contextlib.suppress(FileExistsError):  # (mkdir never follows a link at its last component)
            os.mkdir(folder, 0o755)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if create:
            raise
        yield None
        return
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            refuse(folder, os.lstat(folder), _link_target(folder), folder=True)
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def check_folder(folder: Path, db_name: str = "index.db") -> None:
    """Everything saipling would write in an existing index folder, checked without creating anything: the
    folder, the database, its side files and the lock (a read-only command refuses them too: the next write
    would go through them)."""
    with open_folder(folder, create=False) as fd:
        if fd is None:
            return
        check_entry(folder, db_name, fd, regular=False)
        for suffix in SQLITE_SIDE_FILES:
            check_entry(folder, db_name + suffix, fd)
        check_entry(folder, LOCK_FILE, fd)


def open_file(folder: Path, dir_fd: int, name: str, flags: int, mode: int = 0o644) -> int:
    """os.open of `name` in the folder (relative to its descriptor), never through a link; the file must be a
    regular file with one name. Returns the descriptor. O_TRUNC is applied only after those checks (a hard link
    to a file elsewhere is refused before anything of it is emptied)."""
    path = folder / name
    truncate = bool(flags & os.O_TRUNC)
    try:
        fd = os.open(name, (flags & ~os.O_TRUNC) | _OPEN_FLAGS, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            target = _link_target(path, name, dir_fd)
            raise IndexPathUnsafe(path, f"is a symbolic link (to {target})") from None
        raise
    try:
        st = os.fstat(fd)
        refuse(path, st)
        if not stat.S_ISREG(st.st_mode):
            raise IndexPathUnsafe(path, "is not a regular file")
        if truncate:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_gitignore(dir_fd: int) -> None:
    """`.gitignore` with `*` in a new index folder; an existing entry (even a link) is left alone."""
    # it may exist (O_EXCL also refuses a link there), or the folder be read-only (opening the index says so)
    try:
        fd = os.open(GITIGNORE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o644, dir_fd=dir_fd)
    except OSError:
        return
    try:
        os.write(fd, b"*\n")
    except OSError:
        pass
    finally:
        os.close(fd)


def sqlite_path(folder: Path, dir_fd: int, name: str) -> str:
    """A path to `name` in the folder that SQLite can open with SQLITE_OPEN_NOFOLLOW: no link anywhere on it
    (the project root may sit behind one), checked to be the folder `dir_fd` holds."""
    real = os.path.realpath(folder)
    here, held = os.stat(real), os.fstat(dir_fd)
    if (here.st_dev, here.st_ino) != (held.st_dev, held.st_ino):
        raise IndexPathUnsafe(folder, "changed while it was being opened")
    return os.path.join(real, name)


def free_name(folder: Path, dir_fd: int, base: str) -> str:
    """`base`, or `base-2`, `base-3`... : a name nothing (not even a dangling link) holds in the folder."""
    name, n = base, 1
    while True:
        try:
            os.lstat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return name
        n += 1
        name = f"{base}-{n}"


def rename(dir_fd: int, old: str, new: str) -> None:
    """Rename inside the folder (a rename moves the entry itself, never what a link points to)."""
    os.rename(old, new, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


# -- a full disk ---------------------------------------------------------------------------------------------
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
LOW_SPACE = 1 << 20  # less than this free next to the index: a write that failed there failed for room
# Measured on the 13th Age SRD (2.3 MB of markdown): 7.5 MB of index without vectors, 20 MB with 384-dimensional
# ones (the vectors and the embedding cache); scaled by the vectors' size for other models.
TEXT_RATIO = 3.5
VECTOR_RATIO_PER_DIM = 6.0 / 384


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem holding `path` (or its nearest parent)."""
    for p in (Path(path), *Path(path).parents):
        try:
            st = os.statvfs(p)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return None


def out_of_space(exc: BaseException, folder: Path) -> bool:
    """Did this write fail for room? ENOSPC/EDQUOT (an OSError, or SQLite's errno for the last OS call),
    SQLITE_FULL, or an I/O error on a filesystem with (almost) nothing free."""
    import apsw

    code = getattr(exc, "errno", None) or getattr(exc, "system_errno", None)
    if code in NO_SPACE or isinstance(exc, apsw.FullError):
        return True
    if code in (errno.EROFS, errno.EACCES, errno.EPERM) or isinstance(exc, (apsw.ReadOnlyError, PermissionError)):
        return False  # read-only, whatever is free
    if not isinstance(exc, (apsw.IOError, apsw.CantOpenError, OSError)):
        return False
    for p in (Path(folder), *Path(folder).parents):
        try:
            st = os.statvfs(p)
        except OSError:
            continue
        # a read-only mount often says nothing is free (squashfs, an ISO): it is not full
        return not st.f_flag & os.ST_RDONLY and st.f_bavail * st.f_frsize < LOW_SPACE
    return False


def space_needed(markdown_bytes: int, dimensions: int | None, index_bytes: int = 0) -> int:
    """The index's size for this much markdown (an estimate; see TEXT_RATIO), at least what it holds now."""
    ratio = TEXT_RATIO + (VECTOR_RATIO_PER_DIM * dimensions if dimensions else 0.0)
    size = max(markdown_bytes * ratio, index_bytes)
    return int(size * 1.1) + (64 << 10)  # + room for the write-ahead log and the shared-memory file


def disk_full_message(folder: Path, markdown_bytes: int | None, dimensions: int | None) -> str:
    """What to tell the user: the disk is full, where, how much is free and about how much the index needs."""
    free = free_bytes(folder)
    index_bytes = 0
    with contextlib.suppress(OSError):
        index_bytes = os.lstat(folder / "index.db").st_size
    where = f"the disk holding {folder} is full ({human(free) if free is not None else 'nothing'} free)"
    if markdown_bytes is None:
        return f"{where}: free some space there and try again"
    need = space_needed(markdown_bytes, dimensions, index_bytes)
    return (
        f"{where}; the index needs about {human(need)} there (estimate for {human(markdown_bytes)} of markdown"
        f"{', with vectors' if dimensions else ''}): free some space and run `saipling index` again"
    )


def project_disk_full(root: Path, folder: Path, settings: Settings | None) -> str:
    """The full-disk message for a project, with the space its index needs (from its markdown's size)."""
    markdown = dims = None
    if settings is not None:
        from ...files.scanner import scan

        markdown = sum(e.size for e in scan(root, settings).entries)
        dims = None if settings.provider == "none" else settings.dimensions or 384
    return disk_full_message(folder, markdown, dims)
