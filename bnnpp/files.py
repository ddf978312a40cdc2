"""Atomic file output: a file, or a set of files, appears complete or not at all.

Every writer in bnnpp goes through these helpers instead of writing to a
temporary name and renaming it by hand:

- :func:`atomic_path` yields a temporary path beside the target, for writers that need a path
  (netCDF, ``savefig(path)``, ``np.savez``); :func:`atomic_file` yields an open file object.
  On success the file is flushed to disk and renamed over the target (``os.replace``), so a
  reader sees the old file or the new one, never half of one; on any exception the temporary
  file is removed and the target is left as it was.
- :func:`publish_folder` yields a temporary folder; on success every file written at its top
  level is moved into the output folder, and on any exception nothing is moved and the
  temporary folder is removed.
- :func:`publish_run` writes a whole run folder and swaps it in; it replaces only the files
  bnnpp wrote there (those its reports list: :func:`bnnpp_files`) and keeps the user's.
  :func:`run_folder_lock` serialises the commands that write one run folder. Both work on the
  real folder (:func:`real_folder`): a symbolic link to a folder is followed, never replaced.

Temporary files are created with mode ``0o666`` and the process umask applies, so the result
has the permissions of a file made by ``open(path, "w")`` (``0644`` under umask ``022``), not
the ``0600`` of :func:`tempfile.mkstemp`. Temporary names start with ``.`` and keep the
target's extension, for writers that pick a format from it.

This module imports nothing from bnnpp.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

__all__ = [
    "PublishInterrupted",
    "atomic_file",
    "atomic_path",
    "bnnpp_files",
    "check_free_space",
    "check_path_length",
    "check_writable",
    "publish_folder",
    "publish_run",
    "real_file",
    "real_folder",
    "run_folder_lock",
]


def _fsync(path: str) -> None:
    """Flush a file's data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder(folder: str) -> None:
    """Flush a folder's entries (a rename) to disk; a no-op where folders cannot be synced."""
    try:
        _fsync(folder)
    except OSError:  # e.g. Windows, where a folder cannot be opened
        pass


def _reserve(folder: str, name: str) -> str:
    """Create an empty, new file ``.<stem>.<random><ext>`` in ``folder`` with mode 0o666 less
    the umask; returns its path."""
    stem, ext = os.path.splitext(name)
    for _ in range(100):
        path = os.path.join(folder, f".{stem}.{secrets.token_hex(4)}{ext}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return path
    raise FileExistsError(f"could not create a temporary file for {name} in {folder}")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Write ``path`` through a temporary file in the same folder.

    The folder is created if missing. A symbolic link ``path`` is written through: its target
    is replaced and the link stays (:func:`real_file`). The caller writes the yielded path (an empty file
    already exists there, so the name is reserved); when the ``with`` block ends without an
    exception the file is synced to disk and renamed onto ``path``. On an exception the
    temporary file is removed, ``path`` is untouched, and the exception propagates.

    Yields:
        The temporary path (a ``str``), in ``path``'s folder, with ``path``'s extension.
    """
    path = real_file(path)
    check_path_length(path)
    folder = os.path.dirname(path)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ValueError(f"{folder} is a file, not a folder: choose another path")
    os.makedirs(folder, exist_ok=True)
    tmp = _reserve(folder, os.path.basename(path))
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise
    _fsync_folder(folder)


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """Open ``path`` for writing so that it is replaced only once the ``with`` block succeeds.

    Args:
        path: the file to write (its folder is created if missing).
        mode: ``"w"`` (text) or ``"wb"`` (binary).
        **open_kwargs: passed to :func:`open` (``encoding``, ``newline``, ...).

    Yields:
        The open file object of a temporary file beside ``path``; see :func:`atomic_path` for
        what happens on success and on an exception.
    """
    if mode not in ("w", "wt", "wb"):
        raise ValueError(f"atomic_file writes a new file: mode must be 'w' or 'wb', got {mode!r}")
    with atomic_path(path) as tmp, open(tmp, mode, **open_kwargs) as f:
        yield f


@contextmanager
def publish_folder(out_dir: str | os.PathLike, prefix: str = ".bnnpp-") -> Iterator[str]:
    """Write a set of files into ``out_dir`` all together: through a temporary folder whose
    top-level files are moved into ``out_dir`` only when the ``with`` block succeeds.

    The temporary folder is made inside ``out_dir`` when that folder exists (a command adding
    files to a run folder), otherwise beside it in its parent (created if missing), and then
    ``out_dir`` is created only on success: a failure leaves no new folder behind. Files in
    ``out_dir`` with the names written are replaced; other files there are kept. On any
    exception nothing is moved, and in every case the temporary folder is removed.

    Args:
        out_dir: the output folder.
        prefix: start of the temporary folder's name (begin it with ``.`` to keep it hidden).

    Yields:
        The temporary folder's path (a ``str``): write the files into it.
    """
    out_dir = os.path.abspath(os.fspath(out_dir))
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ValueError(f"{out_dir} is a file: give a folder path")
    if os.path.isdir(out_dir):
        where = out_dir
    else:
        where = os.path.dirname(out_dir)
        os.makedirs(where, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=prefix, dir=where)
    try:
        yield tmp
        names = sorted(os.listdir(tmp))
        for name in names:
            _fsync(os.path.join(tmp, name))
        os.makedirs(out_dir, exist_ok=True)
        for name in names:
            os.replace(os.path.join(tmp, name), os.path.join(out_dir, name))
        _fsync_folder(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


NAME_MARGIN = 32
"""Characters a written name may need beyond the user's: the temporary and lock names beside a
target (``.<name>.<8 hex>.ext``, ``.bnnpp-new-<name>-<random>``, ``.<name>.lock``)."""


def check_path_length(path: str | os.PathLike) -> None:
    """Raise a one-line ``ValueError`` when ``path`` (absolute) or one of its names is longer than
    the file system takes (``PC_PATH_MAX``, ``PC_NAME_MAX`` of its nearest existing folder), less
    :data:`NAME_MARGIN` for the temporary names written beside it: found before any folder is
    made, not half-way through creating them."""
    path = os.path.abspath(os.fspath(path))
    where = path
    while not os.path.isdir(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    try:
        name_max, path_max = os.pathconf(where, "PC_NAME_MAX"), os.pathconf(where, "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows) or no answer: nothing to check
        return
    longest = max((p for p in path.split(os.sep) if p), key=lambda p: len(p.encode()), default="")
    if len(longest.encode()) > name_max - NAME_MARGIN:
        raise ValueError(
            f"{path}: a name in it is too long ({len(longest.encode())} bytes; this file system takes {name_max}, less "
            f"{NAME_MARGIN} for the temporary names written beside it): shorten it"
        )
    if len(path.encode()) > path_max - NAME_MARGIN:
        raise ValueError(
            f"{path[:60]}...: the path is too long ({len(path.encode())} bytes; this file system takes {path_max}): use a shorter one"
        )


def check_writable(folder: str | os.PathLike) -> None:
    """Raise a one-line ``ValueError`` unless files can be written into ``folder``: the folder
    itself when it exists, else the nearest existing parent (where it would be created); a path
    too long is refused first (:func:`check_path_length`). A probe file is written and
    removed; nothing is created otherwise."""
    folder = os.path.abspath(os.fspath(folder))
    check_path_length(folder)
    target = folder
    while not os.path.exists(target):
        parent = os.path.dirname(target)
        if parent == target:
            break
        target = parent
    if not os.path.isdir(target):
        raise ValueError(f"cannot create {folder}: {target} is a file, not a folder; choose another path")
    try:
        fd, probe = tempfile.mkstemp(prefix=".bnnpp-probe-", dir=target)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise ValueError(f"cannot write to {folder} ({e.strerror or e}): choose a writable folder") from None


def check_free_space(folder: str | os.PathLike, needed: int, what: str = "the output") -> None:
    """Raise a one-line ``ValueError`` when the file system holding ``folder`` (or its nearest
    existing parent) has less than ``needed`` bytes free, with a 10% margin: a full disk is
    found before writing starts, not by the HDF5 library in the middle of a file."""
    target = os.path.abspath(os.fspath(folder))
    while not os.path.exists(target) and os.path.dirname(target) != target:
        target = os.path.dirname(target)
    free = shutil.disk_usage(target).free
    if free < 1.1 * needed:
        raise ValueError(
            f"not enough disk space for {what} in {folder}: about {needed / 2**20:.1f} MiB needed, "
            f"{free / 2**20:.1f} MiB free; free some space or choose another folder"
        )


_RUN_PREFIX = ".bnnpp-"


def _siblings(out_dir: str, kind: str) -> list[str]:
    parent, name = os.path.split(out_dir)
    stem = f"{_RUN_PREFIX}{kind}-{name}-"
    return [os.path.join(parent, f) for f in os.listdir(parent) if f.startswith(stem)] if os.path.isdir(parent) else []


@contextmanager
def run_folder_lock(out_dir: str | os.PathLike) -> Iterator[str]:
    """Hold an advisory lock on a run folder for the whole of a command that writes it, so that
    a second writer fails at once; clean up after writers that were killed.

    The lock is ``flock`` on ``.<name>.lock`` beside the folder (released by the system when
    the process ends, however it ends); the file is removed when the command ends, and one
    that a killed process left is taken over. Once it is held, temporary folders that a killed run
    left beside the target are removed, and a previous run that a kill left moved aside (the
    target missing) is moved back.

    Yields:
        The real path of the run folder (:func:`real_folder`: symbolic links resolved).

    Raises:
        ValueError: another process holds the lock; ``out_dir`` is a file or a dangling link.
    """
    import fcntl

    out_dir = real_folder(out_dir)  # one lock per folder, whatever link names it
    parent, name = os.path.split(out_dir)
    os.makedirs(parent, exist_ok=True)
    lock_path = os.path.join(parent, f".{name}.lock")
    while True:
        handle = open(lock_path, "a+")  # noqa: SIM115  (held open for the lock's lifetime)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise ValueError(
                f"another bnnpp process is writing {out_dir} (lock {lock_path}); wait for it to finish or choose another folder"
            ) from None
        # the holder before us removes the file before it lets go: a lock on a file that is no
        # longer at lock_path guards nothing, so open the path again
        try:
            current = os.stat(lock_path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        handle.close()
    try:
        for stale in _siblings(out_dir, "new"):
            shutil.rmtree(stale, ignore_errors=True)
        old = _siblings(out_dir, "old")
        if old and not os.path.exists(out_dir):
            os.replace(old[0], out_dir)  # killed between the two renames of publish_run: keep the old run
            old = old[1:]
        for stale in old:
            shutil.rmtree(stale, ignore_errors=True)
        yield out_dir
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_path)  # while still held: no lock file is left beside the run
        handle.close()


class PublishInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while :func:`publish_run` swapped a run folder in: the swap
    was finished first (the folder holds the new run, complete), then this is raised.

    Attributes:
        signum: the signal; folder: the run folder written.
    """

    def __init__(self, signum: int, folder: str):
        self.signum, self.folder = signum, folder
        super().__init__(f"{signal.Signals(signum).name} while publishing {folder}: the run was written")


@contextmanager
def _signals_deferred() -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM over a block that must not stop half-way; yields the list of
    signals that arrived (the caller acts on them after the block). Outside the main thread
    nothing is caught."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def real_file(path: str | os.PathLike) -> str:
    """The absolute real path of a file to write: a symbolic link (or a chain of them) is
    followed to its target, so that writing replaces the target and keeps the link, as
    ``open(path, "w")`` would.

    Raises:
        ValueError: ``path`` is a symbolic link to nothing (a dangling link: writing through it
            would create a file the user may not expect, replacing it would lose the link), or
            a link loop.
    """
    path = os.path.abspath(os.fspath(path))
    if not os.path.islink(path):
        return path
    try:
        real = os.path.realpath(path, strict=True)
    except (OSError, RuntimeError):  # dangling link or loop (RuntimeError before Python 3.13 for loops only)
        target = os.readlink(path)
        raise ValueError(
            f"{path} is a symbolic link to {target}, which does not exist: create that file, remove the link or choose another path"
        ) from None
    if os.path.isdir(real):
        raise ValueError(f"{path} links to the folder {real}: name a file to write")
    return real


def real_folder(path: str | os.PathLike) -> str:
    """The absolute real path of a folder to write (symbolic links resolved), made or not.

    Raises:
        ValueError: ``path`` is a symbolic link to nothing (a dangling link), or names a file.
    """
    path = os.path.abspath(os.fspath(path))
    real = os.path.realpath(path)
    if os.path.islink(path) and not os.path.exists(path):
        raise ValueError(f"{path} is a symbolic link to {real}, which does not exist: create that folder or choose another path")
    if os.path.exists(real) and not os.path.isdir(real):
        raise ValueError(f"{path} is a file: give a folder path")
    return real


def _json_object(path: str) -> dict | None:
    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def bnnpp_files(folder: str | os.PathLike) -> set[str]:
    """The names in a run folder that bnnpp wrote, as its own reports list them: ``metrics.json``
    and its ``files`` (``bnnpp fit``), ``evaluation.json/.md/.npz`` and the ``figures`` that
    evaluation.json lists (``bnnpp evaluate``), ``prune.json/.md`` and ``snr.png`` (``bnnpp
    prune``). A writer that adds files to a run folder lists them in its report here. Every
    other entry is the user's."""
    folder = os.fspath(folder)
    names = {"metrics.json"}
    metrics = _json_object(os.path.join(folder, "metrics.json")) or {}
    names.update(n for n in metrics.get("files", []) or [] if isinstance(n, str))
    evaluation = _json_object(os.path.join(folder, "evaluation.json"))
    if evaluation is not None:
        names.update({"evaluation.json", "evaluation.md", "evaluation.npz"})
        names.update(n for n in evaluation.get("figures", []) or [] if isinstance(n, str))
    if _json_object(os.path.join(folder, "prune.json")) is not None:
        names.update({"prune.json", "prune.md", "snr.png"})
    return {n for n in names if n and os.path.basename(n) == n}


def _link_or_copy(src: str, dst: str) -> None:
    """A hard link ``dst`` to ``src`` (instant, no extra space), or a copy where links fail."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def _carry(src: str, dst: str) -> None:
    """Put the user's entry ``src`` (file, link or folder) at ``dst`` without touching ``src``."""
    if os.path.islink(src):
        os.symlink(os.readlink(src), dst)
    elif os.path.isdir(src):
        shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(src, dst)


@contextmanager
def publish_run(out_dir: str | os.PathLike) -> Iterator[str]:
    """Write a whole run folder and publish it at once (hold :func:`run_folder_lock` around it).

    Yields a temporary folder beside the target (the real folder: a symbolic link ``out_dir``
    is followed and stays a link). On success the entries of the previous run folder that
    bnnpp did not write (the user's own files: not in :func:`bnnpp_files`) are hard-linked
    (or copied) into the new folder, beside the files written (which win a clash); then the
    previous run is renamed aside, the new folder is renamed to the target and the previous
    run is deleted, so the target is always either the old run or the new one, complete.
    SIGINT and SIGTERM are held over the swap: one that arrives then raises
    :class:`PublishInterrupted` once the new run is in place. On any other exception the
    temporary folder is removed and the old run is left as it was.

    Yields:
        The temporary folder's path.
    """
    out_dir = real_folder(out_dir)
    parent, name = os.path.split(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f"{_RUN_PREFIX}new-{name}-", dir=parent)
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
        written = sorted(os.listdir(tmp))
        if os.path.isdir(out_dir):
            ours = bnnpp_files(out_dir) | set(written)
            for entry in sorted(os.listdir(out_dir)):
                if entry not in ours:
                    _carry(os.path.join(out_dir, entry), os.path.join(tmp, entry))
        for entry in written:
            _fsync(os.path.join(tmp, entry))
        _fsync_folder(tmp)
        with _signals_deferred() as signals:
            old = None
            if os.path.exists(out_dir):
                old = os.path.join(parent, f"{_RUN_PREFIX}old-{name}-{secrets.token_hex(4)}")
                os.replace(out_dir, old)
            os.replace(tmp, out_dir)
            _fsync_folder(parent)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        if signals:
            raise PublishInterrupted(signals[0], out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
