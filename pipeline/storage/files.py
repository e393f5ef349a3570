"""Local atomic files: temp file beside the target, fsync, rename, fsync of the directory; umask-respecting modes."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from bench_build.storage.errors import StorageError
from bench_build.storage.owners import glob_escape, owner_tag, temp_owner_dead

HASH_CHUNK = 8 << 20


# -- helpers ---------------------------------------------------------------------------------------
def refuse_non_directory(path: str | Path, what: str) -> None:
    """StorageError (a refusal: nothing was written) unless ``path`` is a directory or can be made one: the
    nearest existing one of it and its ancestors must be a directory, not a file or a broken link. Checked
    before a command starts work, so the mkdir deep inside it cannot fail half-way with NotADirectoryError.
    ``what`` names the argument (``"--out"``)."""
    path = Path(path)
    if (p := in_the_way(path)) is not None:
        kind = "a broken link" if p.is_symlink() else "a file"
        raise StorageError(f"{what} {path}: {p} is {kind}, not a directory; give a directory (or a "
                           "path where one can be created)")


def refuse_unwritable(path: str | Path, what: str) -> None:
    """`refuse_non_directory`, then StorageError unless a file can be created in the nearest existing one of
    ``path`` and its ancestors (where the first folder or file would go): under /proc or on a read-only disk the
    mkdir deep inside a command failed after its work began, as a bare OSError (`run`: exit 1) or a traceback
    (`publish`). For commands that write; ``what`` names the argument (``"--out"``)."""
    refuse_non_directory(path, what)
    path = Path(path)
    d = nearest_existing(path)
    if (why := cannot_create(d, "out")) is not None:
        where = "files in it" if d == path else f"a folder in {d}"
        raise StorageError(f"{what} {path}: cannot create {where} ({why}); give a directory on a writable disk")


def cannot_create(d: Path, purpose: str) -> str | None:
    """Why no file can be created in the existing directory ``d`` (the OS's words), or None. Tried by creating
    and removing an empty file ``.probe.<owner>.<purpose>.tmp``: `os.access` reads mode bits only, so root
    passes it in /proc, where mkdir then fails ("No such file or directory")."""
    probe = d / f".probe.{owner_tag()}.{purpose}.tmp"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # left by a killed command of this same process id: it can be written, then
        fd = None
    except OSError as e:
        return e.strerror or str(e)
    if fd is not None:
        os.close(fd)
    os.unlink(probe)
    return None


def in_the_way(path: str | Path) -> Path | None:
    """What stops ``path`` from being made a directory: the nearest existing one of it and its ancestors (a link
    counts, even a broken one) when that is not a directory; None when ``path`` is one or can be made one."""
    p = nearest_existing(Path(path))
    return None if p.is_dir() else p


def nearest_existing(path: Path) -> Path:
    """The nearest of ``path`` and its ancestors that exists (a link counts, even a broken one); '/' at worst."""
    return next(p for p in (path, *path.absolute().parents) if os.path.lexists(p))


def current_umask() -> int:
    """The process umask, read without changing it (``/proc/self/status`` on Linux; elsewhere a set-and-restore,
    which is not thread-safe, hence only the fallback)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def mkstemp_in(directory: Path, name: str) -> tuple[int, str]:
    """A temp file ``.<name>.<host>~<pid>.<random>.tmp`` in ``directory`` (its owner is in its name).

    mkstemp creates it 0600; it is set to what ``open()`` would give (0666 & ~umask, 0644 by default) so the
    file renamed into place from it (shards, manifests, cards, pulled files) is readable by the group."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.{owner_tag()}.", suffix=".tmp", dir=directory)
    os.fchmod(fd, 0o666 & ~current_umask())
    return fd, tmp


# -- durable names ---------------------------------------------------------------------------------
# fsync of a file puts its bytes on disk, not its name: a rename lives in the directory, which a power loss (not
# a killed process: the kernel still holds it) can roll back. Every rename, link or mkdir that publishes a name a
# later step relies on (a shard the ledger records, a ledger entry, the manifest, the card, a render, a pulled
# file) is followed by an fsync of the directory holding the new name: `fsync_dir`, through `replace_durably`,
# `fsync_replace` and `make_dirs`.
_NO_DIR_FSYNC = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF)


def fsync_dir(directory: str | Path) -> None:
    """fsync ``directory`` itself, so the names renamed, linked or created in it so far survive a power loss.

    A file system that cannot fsync a directory (``EINVAL`` / ``ENOTSUP``: some FUSE and network file systems)
    offers nothing stronger, and is not an error; any other failure (``EIO``) is raised."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in _NO_DIR_FSYNC:
            raise
    finally:
        os.close(fd)


def replace_durably(src: str | Path, path: Path) -> None:
    """``os.replace(src, path)``, then `fsync_dir` of ``path``'s directory: once this returns, ``path`` names the
    new file after a power loss too. ``src``'s bytes must already be on disk (fsynced, or an existing file)."""
    os.replace(src, path)
    fsync_dir(path.parent)


def make_dirs(directory: str | Path) -> None:
    """``mkdir -p``, then `fsync_dir` of the parent of each directory it created: a file renamed into a new
    partition directory is not lost with that directory's own name. Costs nothing when ``directory`` exists.

    A file standing where one of the folders must be fails it with EEXIST or ENOTDIR, whose path is the folder, not
    that file: the error gets the file as ``in_the_way`` (`in_the_way`), for the message naming it."""
    directory = Path(directory)
    if directory.is_dir():
        return
    new = []
    p = Path(os.path.abspath(directory))
    while not p.is_dir() and p != p.parent:
        new.append(p)
        p = p.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        e.in_the_way = in_the_way(directory)  # type: ignore[attr-defined]
        raise
    for d in reversed(new):
        fsync_dir(d.parent)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically and durably (temp file in the same dir, fsync, rename, fsync of
    the directory)."""
    make_dirs(path.parent)
    fd, tmp = mkstemp_in(path.parent, path.name)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        replace_durably(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fsync_replace(tmp: str | Path, path: Path) -> None:
    """fsync ``tmp``'s bytes, rename it to ``path``, fsync ``path``'s directory (`replace_durably`)."""
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    replace_durably(tmp, path)


def fsync_replace_named(tmp: Path, path: Path) -> None:
    """`fsync_replace` on a background thread: a failure (disk full, I/O error) names the file it was for, as the
    task's error message must (`fsync` itself names no file)."""
    try:
        fsync_replace(tmp, path)
    except OSError as e:
        e.bench_build_key = str(path)  # type: ignore[attr-defined]
        raise

def atomic_write_with(path: Path, write) -> None:
    """Write ``path`` atomically with ``write(tmp_name)`` (a figure's savefig, torch.save, …): a temp file beside
    it with the user's umask, fsynced and renamed into place (`fsync_replace`); nothing under the final name if
    ``write`` fails. The temp is named as `mkstemp_in` names it (``….tmp``, its owner in its name), so a killed
    writer's temp is one `remove_dead_temps` finds: ``write`` must not infer a format from the name."""
    make_dirs(path.parent)
    fd, tmp = mkstemp_in(path.parent, path.name)
    os.close(fd)
    try:
        write(tmp)
        fsync_replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- whole folders -----------------------------------------------------------------------------------
# A folder of files that belong together (a validation report) is written into a temp folder beside it and put in
# its place whole, so a reader never sees some files of the old one beside some of the new.
AT_FDCWD = -100  # Linux: paths relative to the working directory
RENAME_EXCHANGE = 2  # renameat2: swap the two names atomically


def staged_dir(path: Path) -> Path:
    """A new empty folder ``.<name>.<host>~<pid>.<random>.tmp`` beside ``path`` (its owner in its name, as
    `mkstemp_in` names temp files; mode as ``mkdir`` gives) to write ``path``'s files into, then `replace_dir`.
    The temp folders of ``path`` left by a killed writer are removed first (`remove_dead_temp_dirs`)."""
    make_dirs(path.parent)
    remove_dead_temp_dirs(path)
    staged = Path(tempfile.mkdtemp(prefix=f".{path.name}.{owner_tag()}.", suffix=".tmp", dir=path.parent))
    os.chmod(staged, 0o777 & ~current_umask())
    return staged


#: how `replace_dir`'s two-rename fallback ends the name of the old folder it renames aside (`mkdtemp`'s random
#: part has no hyphen, so a staged folder never ends so)
ASIDE = "-aside.tmp"


def remove_dead_temp_dirs(path: Path) -> int:
    """Delete the temp folders of ``path`` (`staged_dir`, `replace_dir`'s aside) whose owner process is dead;
    how many. A dead writer's aside with no ``path`` (killed between `replace_dir`'s two renames) is the old
    folder, whole: it is put back as ``path``, not deleted."""
    n = 0
    for p in sorted(path.parent.glob(f".{glob_escape(path.name)}.*.tmp")):
        if p.is_dir() and not p.is_symlink() and temp_owner_dead(p.name):
            if p.name.endswith(ASIDE) and not os.path.lexists(path):
                os.rename(p, path)
                fsync_dir(path.parent)
                continue
            shutil.rmtree(p, ignore_errors=True)
            n += 1
    return n


def replace_dir(staged: Path, path: Path, *, remove_old: bool = True) -> Path | None:
    """Put the finished folder ``staged`` (`staged_dir`) in place of ``path``, whole: a reader sees the old folder
    or the new one, never a mix. Where the system swaps two names atomically (Linux ``renameat2``), no moment is
    without ``path``; elsewhere the old folder is renamed aside first, and a writer killed between the two renames
    leaves no ``path`` until the next `staged_dir` of it, whose `remove_dead_temp_dirs` puts the old folder back.

    The old folder is deleted, or with ``remove_old=False`` left where it went (under the name ``staged``, or
    the aside) and that place returned, for a caller swapping several folders to delete once all are in place.
    None when there was no old folder."""
    old: Path | None = None
    if not os.path.lexists(path):
        os.rename(staged, path)
    elif _exchange(staged, path):
        old = staged  # the old folder, under the staged name
    else:
        old = path.with_name(f".{path.name}.{owner_tag()}.{uuid.uuid4().hex[:8]}{ASIDE}")
        os.rename(path, old)
        os.rename(staged, path)
    fsync_dir(path.parent)
    if old is not None and remove_old:
        shutil.rmtree(old)
        return None
    return old


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the C
    library or the file system has no such call (macOS, NFS), so the caller renames in two steps."""
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if call(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, streamed in 8 MiB chunks (the checksum every manifest entry records)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()
