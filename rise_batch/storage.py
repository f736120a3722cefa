"""Where the engine reads and writes: a POSIX path, or a URI of object storage (`s3://bucket/prefix`, `gs://…`, any
filesystem pyarrow or fsspec knows), behind one small path-like type, so a command does not know which it talks to.

`location(s)` returns a `pathlib.Path` for a POSIX path (or `file://` URI): every existing Path code path, with its
atomic renames, stays as it was. Anything else is an `ObjectPath`: the part of Path's API the engine uses (`/`,
name, parent, exists, stat, read_bytes, glob, …) over a `pyarrow.fs.FileSystem`, which is what Ray Data uses too.
`pyarrow.fs.FileSystem.from_uri` resolves the URI (S3 takes AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN, AWS_REGION and AWS_ENDPOINT_URL from the environment, as pyarrow 26 reads them); a scheme pyarrow
has no filesystem for goes through fsspec (`pyarrow.fs.FSSpecHandler`).

Object storage has no rename: an object is written once under its final name (an S3 PUT appears whole or not at
all), from bytes complete in memory or a finished local file, and a done marker is written last; nothing here
depends on rename or hardlinks there.

Credentials never reach what is recorded: `str()` of an ObjectPath, and `redact()` of any location string, drop the
URI's user:password part (pyarrow's `s3://KEY:SECRET@bucket/…`) and its query options (`?endpoint_override=…`). The
options of a URI given to this process are remembered for its bucket, so the redacted names written into a manifest
or a shard spec resolve again, in this process and in workers that were handed the same URI (Ray actors get their
config in memory, never through a file).

Pure stdlib at import; pyarrow (and fsspec) only when an ObjectPath is made.
"""

from __future__ import annotations

import fnmatch
import io
import os
import re
import threading
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple
from urllib.parse import urlsplit

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_OPTIONS: dict[str, tuple[str, str]] = {}  # "scheme://bucket" -> (user-info, query) a URI of this process gave
_FILESYSTEMS: dict[str, Any] = {}  # the URI with them -> its pyarrow FileSystem (one per process)
_LOCK = threading.Lock()


def is_uri(s: str | os.PathLike) -> bool:
    """`s` names a location by URI (`scheme://…`), as opposed to a plain path."""
    return not isinstance(s, Path) and bool(_SCHEME.match(str(s)))


def is_local_path(s: str | os.PathLike | ObjectPath) -> bool:
    """`s` is on a POSIX file system of this machine (a path or a `file://` URI): what a per-node probe checks.
    Object storage is shared by every node by definition, so it needs no probe."""
    if isinstance(s, ObjectPath):
        return False
    m = _SCHEME.match(str(s)) if not isinstance(s, Path) else None
    return m is None or m.group(1).lower() == "file"


def redact(s: str | os.PathLike | ObjectPath) -> str:
    """`s` as it may be recorded (manifest, log line, run hash, error message): a URI without its query options
    and without a user:password part; a path unchanged."""
    text = str(s)
    if not is_uri(text):
        return text
    parts = urlsplit(text)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}"


_URI_IN_TEXT = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)(?:[^/@\s'\"]*@)?([^\s'\"?]*)(?:\?[^\s'\"]*[^\s'\":;,.)])?")


def redact_text(text: str) -> str:
    """`text` (an error message, a summary line) with every URI in it redacted as `redact` does."""
    return _URI_IN_TEXT.sub(lambda m: m.group(1) + m.group(2), text)


def location(s: str | os.PathLike | ObjectPath) -> Path | ObjectPath:
    """The Path or ObjectPath `s` names; `file://` URIs are paths."""
    if isinstance(s, (Path, ObjectPath)):
        return s
    text = os.fspath(s)
    if not is_uri(text):
        return Path(text)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return Path(parts.path)
    user, _, host = parts.netloc.rpartition("@")
    base = f"{scheme}://{host}"
    with _LOCK:
        if user or parts.query:
            _OPTIONS[base] = (user, parts.query)
        user, query = _OPTIONS.get(base, ("", ""))
    return ObjectPath(scheme, _filesystem(scheme, host, user, query), f"{host}{parts.path}")


def child(base: str | os.PathLike, *parts: str) -> str:
    """`base` joined with `parts`, as a string that still resolves the same way: a URI keeps its user-info and query
    options (`s3://K:S@bucket/out?endpoint_override=…` -> `s3://K:S@bucket/out/cells/c?endpoint_override=…`), so a
    config handed to a worker in another process names the same bucket; a path is joined as a path."""
    text = os.fspath(base)
    if not is_uri(text):
        return str(Path(text).joinpath(*parts))
    head, sep, query = text.partition("?")
    tail = "/".join(p.strip("/") for p in parts if p)
    return f"{head.rstrip('/')}/{tail}{sep}{query}"


def known_options() -> dict[str, tuple[str, str]]:
    """The URI options (user-info, query) this process was given, per bucket: what a worker process needs to
    resolve the credential-free names a shard spec carries (`remember_options` there). In memory only."""
    with _LOCK:
        return dict(_OPTIONS)


def remember_options(options: dict[str, tuple[str, str]] | None) -> None:
    with _LOCK:
        _OPTIONS.update(options or {})


def _options_tail(scheme: str, host: str) -> tuple[str, str]:
    """(user-info, query) given for this bucket in this process, for a worker to rebuild an ObjectPath."""
    with _LOCK:
        return _OPTIONS.get(f"{scheme}://{host}", ("", ""))


def _filesystem(scheme: str, host: str, user: str, query: str):
    """One pyarrow FileSystem per bucket and options in this process (an S3 client is costly to make)."""
    uri = f"{scheme}://{user + '@' if user else ''}{host}/" + (f"?{query}" if query else "")
    with _LOCK:
        fs = _FILESYSTEMS.get(uri)
    if fs is not None:
        return fs
    import pyarrow as pa
    import pyarrow.fs as pafs

    try:
        fs, _ = pafs.FileSystem.from_uri(uri)
    except pa.ArrowInvalid as e:
        if "Unrecognized filesystem type" not in str(e):
            raise ValueError(f"{scheme}://{host}: {e}") from None
        import fsspec

        try:
            fs = pafs.PyFileSystem(pafs.FSSpecHandler(fsspec.filesystem(scheme)))
        except (ImportError, ValueError) as e2:
            raise ValueError(f"{scheme}://{host}: no filesystem for this URI ({e2})") from None
    with _LOCK:
        return _FILESYSTEMS.setdefault(uri, fs)


class Stat(NamedTuple):
    st_size: int
    st_mtime: float


class ObjectPath:
    """A file or prefix in object storage, with the part of `pathlib.Path`'s API the engine uses. Directories
    exist as prefixes only: `mkdir` does nothing, a prefix exists once an object is under it."""

    def __init__(self, scheme: str, fs: Any, path: str) -> None:
        self.scheme, self.fs, self.path = scheme, fs, path.rstrip("/")

    # -- naming -------------------------------------------------------------------------------------------------
    def __str__(self) -> str:
        return f"{self.scheme}://{self.path}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other: ObjectPath) -> bool:
        return str(self) < str(other)

    def __truediv__(self, part: str | os.PathLike) -> ObjectPath:
        return ObjectPath(self.scheme, self.fs, f"{self.path}/{os.fspath(part).strip('/')}")

    def joinpath(self, *parts: str) -> ObjectPath:
        out = self
        for p in parts:
            out = out / p
        return out

    @property
    def _pure(self) -> PurePosixPath:
        return PurePosixPath(self.path)

    name = property(lambda self: self._pure.name)
    suffix = property(lambda self: self._pure.suffix)
    suffixes = property(lambda self: self._pure.suffixes)
    stem = property(lambda self: self._pure.stem)

    @property
    def parent(self) -> ObjectPath:
        return ObjectPath(self.scheme, self.fs, str(self._pure.parent))

    def with_name(self, name: str) -> ObjectPath:
        return self.parent / name

    def relative_to(self, other: ObjectPath) -> PurePosixPath:
        return self._pure.relative_to(other.path)

    def __reduce__(self):
        """Rebuilt from its URI where it is unpickled: the filesystem (which holds credentials read from the
        environment) never travels; the URI options given for its bucket in this process do, in memory."""
        host, _, rest = self.path.partition("/")
        user, query = _options_tail(self.scheme, host)
        full = f"{self.scheme}://{user + '@' if user else ''}{host}/{rest}" + (f"?{query}" if query else "")
        return (location, (full,))

    # -- reading ------------------------------------------------------------------------------------------------
    def _info(self):
        return self.fs.get_file_info(self.path)

    def exists(self) -> bool:
        import pyarrow.fs as pafs

        return self._info().type != pafs.FileType.NotFound

    def is_file(self) -> bool:
        import pyarrow.fs as pafs

        return self._info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        import pyarrow.fs as pafs

        return self._info().type == pafs.FileType.Directory

    def stat(self) -> Stat:
        import pyarrow.fs as pafs

        info = self._info()
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"{self}: no such object")
        mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
        return Stat(info.size or 0, mtime)

    def read_bytes(self) -> bytes:
        with self.open_input_file() as f:
            return f.read()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def open_input_file(self):
        """A seekable pyarrow file (what Parquet readers take)."""
        try:
            return self.fs.open_input_file(self.path)
        except FileNotFoundError:
            raise FileNotFoundError(f"{self}: no such object") from None

    def open(self, mode: str = "rb", buffering: int = 1 << 20) -> io.BufferedReader:
        """A buffered binary reader (lines, gzip, seek); object storage is read here, never opened for writing."""
        if mode != "rb":
            raise ValueError(f"{self}: objects are written whole with write_bytes, not opened with {mode!r}")
        return io.BufferedReader(self.open_input_file(), buffer_size=buffering)

    def list(self, recursive: bool = False) -> list[tuple[ObjectPath, int]]:
        """(object, size) of every file under this prefix, sorted; [] when there is none."""
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True, recursive=recursive))
        out = [(ObjectPath(self.scheme, self.fs, i.path), i.size or 0) for i in infos if i.type == pafs.FileType.File]
        return sorted(out)

    def iterdir(self) -> list[ObjectPath]:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        return sorted(ObjectPath(self.scheme, self.fs, i.path) for i in infos)

    def glob(self, pattern: str) -> list[ObjectPath]:
        """Objects directly under this prefix whose name matches `pattern` (one level, like Path.glob)."""
        return [p for p, _ in self.list() if fnmatch.fnmatchcase(p.name, pattern)]

    def rglob(self, pattern: str) -> list[ObjectPath]:
        return [p for p, _ in self.list(recursive=True) if fnmatch.fnmatchcase(p.name, pattern)]

    # -- writing (once, under the final name) -------------------------------------------------------------------
    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to do: a prefix exists once an object is written under it."""

    def write_bytes(self, data: bytes) -> None:
        """`data` as the whole object, in one PUT: it appears whole or not at all. Stored as given (pyarrow would
        gzip a `.gz` name's bytes again by default)."""
        with self.fs.open_output_stream(self.path, compression=None) as f:
            f.write(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    def upload(self, local: str | os.PathLike) -> None:
        """A finished local file as this object (streamed: an index file can be large)."""
        import pyarrow.fs as pafs

        pafs.copy_files(os.fspath(local), self.path, pafs.LocalFileSystem(), self.fs)

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise


AnyPath = Path | ObjectPath


def arrow_source(p: str | os.PathLike | ObjectPath) -> tuple[str, Any]:
    """(path, filesystem) for pyarrow readers and writers (`pq.read_table(path, filesystem=fs)`); the filesystem is
    None for a POSIX path."""
    loc = location(p)
    return (loc.path, loc.fs) if isinstance(loc, ObjectPath) else (str(loc), None)


def open_binary(p: str | os.PathLike | ObjectPath):
    """A buffered binary reader of a file or object."""
    loc = location(p)
    return loc.open("rb")


def move(src: AnyPath, dest: AnyPath) -> None:
    """Move one file; on object storage a copy under the new name, then the old one deleted."""
    if isinstance(src, ObjectPath) and isinstance(dest, ObjectPath) and src.fs is dest.fs:
        src.fs.copy_file(src.path, dest.path)
        src.fs.delete_file(src.path)
        return
    if isinstance(src, Path) and isinstance(dest, Path):
        import shutil

        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(dest))
        return
    dest.write_bytes(src.read_bytes())
    src.unlink()


SUMS = ".sha256.json"  # beside a published tree: {relpath: sha256} of its other objects


def cache_root() -> Path:
    """Where this node's local copies of objects that must be POSIX trees live (an index to memory-map, a docs
    tree; rise_batch/cache.py) unless a run names its own `cache_dir`: $RISE_BATCH_CACHE, else the user's own
    cache directory ($XDG_CACHE_HOME/rise-batch, default ~/.cache/rise-batch), never a shared name in /tmp."""
    if os.environ.get("RISE_BATCH_CACHE"):
        return Path(os.environ["RISE_BATCH_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # the XDG spec ignores a relative one
    return base / "rise-batch"


def staging_path(obj: ObjectPath) -> Path:
    """Where this machine keeps a local stand-in for `obj` (a log appended to, a journal, workspaces): under the
    temp dir, keyed by the object's URI, so a resume on the same machine finds it again."""
    import hashlib
    import tempfile

    key = hashlib.sha256(str(obj.parent).encode()).hexdigest()[:16]
    where = Path(tempfile.gettempdir()) / "rise-batch-staging" / key
    where.mkdir(parents=True, exist_ok=True)
    return where / obj.name


def publish_tree(local: Path, dest: ObjectPath, last: str, sums: bool = False) -> None:
    """A finished local directory as the objects under `dest`, `last` (its done marker, e.g. meta.json) written
    last, so a reader that finds `last` finds every other file; with `sums`, `SUMS` (the sha256 of every other
    object) just before it, against which a node checks its copy (rise_batch/cache.py). What `dest` held before is
    removed first, marker first: an interrupted publish leaves no marker, hence nothing a reader would take for
    whole."""
    import hashlib
    import json

    old = dest.list(recursive=True)
    for obj, _ in sorted(old, key=lambda o: o[0].name != last):
        obj.unlink(missing_ok=True)
    files = sorted((f for f in local.rglob("*") if f.is_file()), key=lambda f: f.relative_to(local).as_posix() == last)
    digests = {}
    for f in files if sums else ():
        with f.open("rb") as fh:
            digests[f.relative_to(local).as_posix()] = hashlib.file_digest(fh, "sha256").hexdigest()
    for f in files[:-1]:
        (dest / f.relative_to(local).as_posix()).upload(f)
    if sums:
        (dest / SUMS).write_bytes(json.dumps(digests, sort_keys=True, indent=0).encode())
    if files:
        (dest / files[-1].relative_to(local).as_posix()).upload(files[-1])
