"""Documents below a directory, opened without following links; links and copies made from the opened file.

A docs directory is shared between users, so nothing in it is trusted: a document that is a symlink (to
/etc/shadow), a path through a symlinked directory, a FIFO (a read that never returns) or a device (/dev/zero, a
read that never ends) must be neither read nor linked. Every document is opened as an `O_PATH` descriptor (which
starts no device driver and cannot block on a FIFO) with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from the
directory held open: one syscall. Where the kernel or a seccomp filter lacks openat2, each component is opened with
`O_NOFOLLOW` and checked with fstat. The descriptor's fstat must say "regular file", and everything after uses the
descriptor, never the path again: the hardlink is made from it (`linkat(AT_EMPTY_PATH)`, or through
`/proc/self/fd/N` and then checked to be the same inode), a copy reads from it (no more bytes than fstat said) and a
read reopens it through /proc (the same inode, now readable). So what lands in a workspace, a preview or a model's
prompt is the file that was checked, and nothing else.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from pathlib import Path

_RESOLVE_NO_XDEV, _RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x01, 0x02, 0x04, 0x08
_AT_FDCWD, _AT_SYMLINK_FOLLOW, _AT_EMPTY_PATH = -100, 0x400, 0x1000
_SYS_OPENAT2 = 437  # one number on every architecture (syscalls added after 5.1 share theirs), except alpha
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY_CHUNK = 1 << 20
# What each kind of non-regular file is called in a refusal.
_KINDS = {
    stat.S_IFLNK: "is a symbolic link",
    stat.S_IFIFO: "is a FIFO (named pipe)",
    stat.S_IFCHR: "is a character device",
    stat.S_IFBLK: "is a block device",
    stat.S_IFSOCK: "is a socket",
    stat.S_IFDIR: "is a directory",
}
THROUGH_LINK = "is reached through a symbolic link or a mount point (or leaves the directory)"
REMEDY = "replace it with the file itself, or drop its docmap row"


class NotADocument(ValueError):
    """A path below a docs (or workspace) directory that is not a regular file reached without links.

    `what` says why in words the agent may see (no host path); the message names the whole path for logs."""

    def __init__(self, root: str, rel: str, what: str) -> None:
        self.rel, self.what = rel, what
        super().__init__(f"{root}/{rel}: {what}; only regular files below {root} are documents ({REMEDY})")


class UnsafeDirectory(ValueError):
    """A docs or workspace directory that is itself a link (or no directory): nothing below it is opened."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Kernel:
    """The two calls Python's os module lacks, bound once per process on first use (no work at import)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.syscall = libc.syscall
        self.syscall.restype = ctypes.c_long
        self.linkat = libc.linkat
        self.linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self.linkat.restype = ctypes.c_int
        resolve = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_XDEV
        self.how = _OpenHow(_PATH_FLAGS, 0, resolve)
        self.how_ref, self.how_size = ctypes.byref(self.how), ctypes.c_size_t(ctypes.sizeof(self.how))
        self.nr = ctypes.c_long(_SYS_OPENAT2)
        self.openat2: bool | None = None  # None: not tried yet; False: this kernel (or seccomp) lacks it
        self.empty_path: bool | None = None  # linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH


_K: _Kernel | None = None


def _kernel() -> _Kernel:
    global _K
    if _K is None:
        _K = _Kernel()
    return _K


def open_path(dir_fd: int, rel: str) -> int:
    """An O_PATH descriptor of `rel` below `dir_fd`, reached without following any link or crossing a mount point:
    a link on the way is ELOOP, `..` out or a mount point (a bind mount of /etc planted below DOCS, a file bind-
    mounted over a document) is EXDEV, a final symlink is opened as itself (for the caller's fstat to refuse)."""
    k = _K or _kernel()
    if "\x00" in rel:  # C would read the name only up to it
        raise OSError(errno.EINVAL, "a NUL character in the path", rel)
    if k.openat2 is not False:
        fd = k.syscall(k.nr, dir_fd, rel.encode("utf-8", "surrogateescape"), k.how_ref, k.how_size)
        if fd >= 0:
            k.openat2 = True
            return fd
        err = ctypes.get_errno()
        if not (k.openat2 is None and err in (errno.ENOSYS, errno.EPERM)):
            raise OSError(err, os.strerror(err), rel)
        k.openat2 = False  # an old kernel, or a seccomp filter that denies it: one component at a time
    return _open_by_component(dir_fd, rel)


def _open_by_component(dir_fd: int, rel: str) -> int:
    """openat2's walk by hand: each component opened with O_NOFOLLOW from the one before, and refused (EXDEV) when
    it lies on another mount than `dir_fd` (st_dev and the mount id of /proc/self/fdinfo: a bind mount of the same
    file system keeps st_dev, not the mount id)."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise OSError(errno.EXDEV, "the path leaves the directory", rel)
    mount = _mount_of(dir_fd)
    fd, owned = dir_fd, False
    try:
        for i, part in enumerate(parts):
            nxt = os.open(part, _PATH_FLAGS, dir_fd=fd)
            if owned:
                os.close(fd)
            fd, owned = nxt, True
            st = os.fstat(fd)
            if _mount_of(fd, st) != mount:
                raise OSError(errno.EXDEV, "the path crosses a mount point", rel)
            if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
                code = errno.ELOOP if stat.S_ISLNK(st.st_mode) else errno.ENOTDIR
                raise OSError(code, os.strerror(code), rel)
        owned = False
        return fd
    finally:
        if owned:
            os.close(fd)


def _mount_of(fd: int, st: os.stat_result | None = None) -> tuple[int, int]:
    """(st_dev, mount id) of what `fd` refers to; the mount id is -1 where /proc does not say it (before 3.15)."""
    st = st or os.fstat(fd)
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
            for line in f:
                if line.startswith(b"mnt_id:"):
                    return st.st_dev, int(line.split()[1])
    except OSError:
        pass
    return st.st_dev, -1


def kind_of(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "is not a regular file")


def open_document(dir_fd: int, root: str, rel: str) -> tuple[int, os.stat_result]:
    """(O_PATH descriptor, its fstat) of the regular file `rel` below `dir_fd`; NotADocument for a link or a file of
    another kind; OSError (ENOENT, ENOTDIR) when there is none. The caller closes the descriptor."""
    try:
        fd = open_path(dir_fd, rel)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EXDEV):
            raise NotADocument(root, rel, THROUGH_LINK) from None
        raise
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotADocument(root, rel, kind_of(st.st_mode))
    return fd, st


def reopen(fd: int) -> int:
    """A readable descriptor of the very file `fd` (an O_PATH descriptor of a checked regular file) refers to."""
    return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)


def read_from(fd: int, st: os.stat_result, max_bytes: int | None = None) -> bytes:
    """The bytes of the checked file: at most its fstat size (a file growing meanwhile adds nothing), or max_bytes."""
    n = st.st_size if max_bytes is None else min(st.st_size, max_bytes)
    rfd = reopen(fd)
    try:
        parts, done = [], 0
        while done < n:
            b = os.pread(rfd, n - done, done)
            if not b:
                break  # the file shrank
            parts.append(b)
            done += len(b)
        return b"".join(parts)
    finally:
        os.close(rfd)


def link_from(fd: int, st: os.stat_result, dst: str, dir_fd: int = _AT_FDCWD) -> None:
    """Hardlink the file `fd` refers to at `dst` (relative to `dir_fd`), never the path it was found at. OSError as
    link(2) raises it: EXDEV, EPERM (protected_hardlinks), EMLINK (the link limit), EEXIST, ENOENT (no such dir)."""
    k = _K or _kernel()
    target = dst.encode("utf-8", "surrogateescape")
    if k.empty_path is not False:
        if k.linkat(fd, b"", dir_fd, target, _AT_EMPTY_PATH) == 0:
            k.empty_path = True
            return
        err = ctypes.get_errno()
        # AT_EMPTY_PATH without CAP_DAC_READ_SEARCH is ENOENT, as is a missing directory: tell them apart once
        if not (err == errno.ENOENT and k.empty_path is None and _dir_exists(dir_fd, os.path.dirname(dst))):
            raise OSError(err, os.strerror(err), dst)
        k.empty_path = False
    if k.linkat(_AT_FDCWD, f"/proc/self/fd/{fd}".encode(), dir_fd, target, _AT_SYMLINK_FOLLOW) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), dst)
    made = os.lstat(dst, dir_fd=_py_dir_fd(dir_fd))
    if (made.st_ino, made.st_dev) != (st.st_ino, st.st_dev):  # the kernel follows fd links to the file itself
        os.unlink(dst, dir_fd=_py_dir_fd(dir_fd))
        raise OSError(errno.EIO, "the link made is not the file checked", dst)


def copy_from(fd: int, st: os.stat_result, dst: str, dir_fd: int = _AT_FDCWD, mode: int = 0o444) -> None:
    """Copy the checked file to a new `dst` (relative to `dir_fd`; never an existing name, which may be a hardlink
    to a corpus file), at most its fstat size, made `mode` only once complete; on any failure (a full disk) no
    partial file is left."""
    where = _py_dir_fd(dir_fd)
    src = reopen(fd)
    try:
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=where)
        try:
            done = 0
            while done < st.st_size:
                n = os.sendfile(out, src, done, min(_COPY_CHUNK, st.st_size - done))
                if n == 0:
                    break  # the file shrank
                done += n
            os.fchmod(out, mode)
        except BaseException:
            os.close(out)
            os.unlink(dst, dir_fd=where)
            raise
        os.close(out)
    finally:
        os.close(src)


def _py_dir_fd(dir_fd: int) -> int | None:
    return None if dir_fd == _AT_FDCWD else dir_fd


def _dir_exists(dir_fd: int, rel: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(rel or ".", dir_fd=_py_dir_fd(dir_fd)).st_mode)
    except OSError:
        return False


class Below:
    """A directory held open (one descriptor per process, so a pickled DocStore reopens it in a Ray actor) and the
    documents below it. The directory itself is opened without following a final link: `DOCS/corpus` that is a
    symlink would make the whole host a corpus."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._fd, self._pid = -1, 0

    def fd(self) -> int:
        if self._pid != os.getpid():
            parent, name = os.path.split(os.path.abspath(self.path))
            pfd = os.open(parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                fd = os.open(name, _PATH_FLAGS, dir_fd=pfd)
            finally:
                os.close(pfd)
            mode = os.fstat(fd).st_mode
            if not stat.S_ISDIR(mode):
                os.close(fd)
                what = "is a symbolic link" if stat.S_ISLNK(mode) else "is not a directory"
                raise UnsafeDirectory(f"{self.path} {what}; give the real directory (move it there, or bind-mount it)")
            self._fd, self._pid = fd, os.getpid()
        return self._fd

    def open(self, rel: str) -> tuple[int, os.stat_result]:
        return open_document(self.fd(), self.path, rel)

    def read(self, rel: str, max_bytes: int | None = None) -> bytes:
        fd, st = self.open(rel)
        try:
            return read_from(fd, st, max_bytes)
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._pid == os.getpid() and self._fd >= 0:
            os.close(self._fd)
        self._fd, self._pid = -1, 0

    def __getstate__(self) -> dict:
        return {"path": self.path, "_fd": -1, "_pid": 0}

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass
