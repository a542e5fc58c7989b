"""One file layer for every path kjax reads or writes: local paths and object
stores (`gs://`, `s3://`, `memory://`, any fsspec URL) behind the same small
set of functions, so no stage ever calls `open`/`os.path`/`glob` on a path a
user gave.

- Every operation goes through fsspec: its LocalFileSystem for local paths,
  gcsfs (Application Default Credentials) for gs://, and so on. Listings are
  never cached: another host may have written since.
- Whole-file writes are never seen half done: locally a temporary name in the
  same folder is moved into place (one rename); remotely one object PUT is
  atomic by itself.
- Tools that only take local files (sentencepiece, ArrayRecord, safetensors,
  matplotlib) work on `local_copy` / `cached_copy` / `staged_dir`, which
  download to, or upload from, a local temporary folder.
- Local results keep the form the user gave (a relative glob lists relative
  paths), so messages name files as the user wrote them.

This module sits at the bottom of kjax: it imports no other kjax stage.
orbax writes checkpoints through etils.epath; kjax/__init__.py makes epath use
gcsfs too (EPATH_USE_TF=false), so both layers reach GCS the same way
(docs/TPU.md, "Paths").
"""
from __future__ import annotations

import contextlib
import glob as _glob
import hashlib
import json
import os
import tempfile
from typing import Iterator

from kjax.errors import KjaxError

CACHE_ENV = "KJAX_CACHE_DIR"   # per-host cache of remote shards (default ~/.cache/kjax)


def is_remote(path) -> bool:
    return "://" in str(path)


def _fs(path: str):
    """(fsspec filesystem, its path without protocol) for a local path or a URL."""
    import fsspec
    try:
        return fsspec.core.url_to_fs(local(path), use_listings_cache=False)
    except (ImportError, ValueError) as e:
        raise KjaxError(f"{path}: cannot open this URL ({e}); gs:// needs gcsfs "
                        f"(pip install gcsfs)") from None


def _shown(fs, found: str, given: str) -> str:
    """A path fsspec returned, in the form of the one the user gave."""
    if is_remote(given):
        return fs.unstrip_protocol(found)
    return found if os.path.isabs(local(given)) else os.path.relpath(found)


def local(path: str) -> str:
    """A local path with `~` expanded (URLs unchanged)."""
    return path if is_remote(path) else os.path.expanduser(path)


def join(base: str, *names: str) -> str:
    if is_remote(base):
        return "/".join([base.rstrip("/"), *(n.strip("/") for n in names)])
    return os.path.join(base, *names)


def parent(path: str) -> str:
    if is_remote(path):
        return path.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(local(path)))


def name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] if is_remote(path) else \
        os.path.basename(os.path.normpath(path))


def exists(path: str) -> bool:
    if not path:   # "" is no path (fsspec would read it as the current folder)
        return False
    fs, bare = _fs(path)
    return fs.exists(bare)


def isfile(path: str) -> bool:
    if not path:
        return False
    fs, bare = _fs(path)
    return fs.isfile(bare)


def isdir(path: str) -> bool:
    """A folder; on an object store, a prefix that holds objects."""
    if not path:
        return False
    fs, bare = _fs(path)
    return fs.isdir(bare)


def listdir(path: str) -> list[str]:
    """Names (not paths) in a folder, sorted; [] when it does not exist."""
    if not isdir(path):
        return []
    fs, bare = _fs(path)
    return sorted({e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(bare, detail=False)} - {""})


def size(path: str) -> int:
    fs, bare = _fs(path)
    return int(fs.size(bare))


def glob(pattern: str) -> list[tuple[str, int]]:
    """(path, size) of the files a pattern (`*`, `?`, `[..]`) names, sorted by path."""
    fs, bare = _fs(pattern)
    found = fs.glob(bare, detail=True) if _glob.has_magic(bare) else \
        ({bare: fs.info(bare)} if fs.exists(bare) else {})
    return sorted((_shown(fs, p, pattern), int(info.get("size") or 0))
                  for p, info in found.items() if info.get("type") != "directory")


def makedirs(path: str) -> None:
    """A folder and its parents (object stores have none to make)."""
    if not is_remote(path):
        fs, bare = _fs(path)
        fs.makedirs(bare, exist_ok=True)


def open_file(path: str, mode: str = "rb", **kwargs):
    """A file object; remote reads stream, remote writes land at close."""
    fs, bare = _fs(path)
    return fs.open(bare, mode, **kwargs)


def read_bytes(path: str) -> bytes:
    fs, bare = _fs(path)
    return fs.cat_file(bare)


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def read_json(path: str):
    return json.loads(read_bytes(path))


@contextlib.contextmanager
def _into_place(path: str) -> Iterator[tuple[object, str]]:
    """(filesystem, the name to write) for a whole-file write of `path`: the
    path itself remotely (one PUT), locally a temporary name beside it that is
    moved into place (one rename) when the block ends without error."""
    fs, bare = _fs(path)
    if is_remote(path):
        yield fs, bare
        return
    fs.makedirs(os.path.dirname(bare), exist_ok=True)
    tmp = f"{bare}.tmp-{os.getpid()}"
    try:
        yield fs, tmp
        fs.mv(tmp, bare)
    finally:
        if fs.exists(tmp):
            fs.rm_file(tmp)


def write_bytes(path: str, data: bytes) -> None:
    """Whole-file write that is never seen half done."""
    with _into_place(path) as (fs, target):
        fs.pipe_file(target, data)


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def json_bytes(obj) -> bytes:
    """kjax's JSON files: UTF-8, indented, keys in insertion order."""
    return json.dumps(obj, ensure_ascii=False, indent=2).encode("utf-8")


def write_json(path: str, obj) -> None:
    write_bytes(path, json_bytes(obj))


def remove(path: str) -> None:
    fs, bare = _fs(path)
    fs.rm_file(bare)


def upload(local_file: str, path: str, move: bool = False) -> None:
    """A local file to `path` (local or remote), whole; `move` removes the source."""
    with _into_place(path) as (fs, target):
        if move and not is_remote(path):
            fs.mv(local_file, target)
        else:
            fs.put_file(local_file, target)
    if move and os.path.exists(local_file):
        os.remove(local_file)


def download(path: str, local_file: str) -> None:
    """`path` to a local file, atomically (a reader never sees part of it)."""
    fs, bare = _fs(path)
    with _into_place(local_file) as (_, target):
        fs.get_file(bare, target)


def copy_tree(src: str, dst: str, skip: tuple[str, ...] = ()) -> None:
    """Every file under `src` to the same relative place under `dst`
    (local or remote on either side; existing files are overwritten), but
    those whose relative path starts with one of `skip`."""
    for rel in walk_files(src):
        if rel.startswith(skip):
            continue
        source, target = join(src, *rel.split("/")), join(dst, *rel.split("/"))
        if is_remote(source):
            download(source, target) if not is_remote(target) else \
                write_bytes(target, read_bytes(source))
        else:
            upload(source, target)


def walk_files(root: str) -> list[str]:
    """Relative '/'-separated paths of the files under `root`, sorted."""
    fs, bare = _fs(root)
    bare = bare.rstrip("/")
    return sorted(p[len(bare) + 1:] for p in fs.find(bare) if p.startswith(bare + "/"))


@contextlib.contextmanager
def local_copy(path: str) -> Iterator[str]:
    """A local file with the contents of `path`: the path itself when local,
    else a temporary download removed afterwards."""
    if not is_remote(path):
        yield local(path)
        return
    with tempfile.TemporaryDirectory(prefix="kjax-") as tmp:
        target = os.path.join(tmp, name(path))
        download(path, target)
        yield target


@contextlib.contextmanager
def staged_prefix(prefix: str) -> Iterator[str]:
    """A local file prefix for tools that write `PREFIX.model`, `PREFIX.vocab`,
    ...: `prefix` itself (its folder made) when local, else one in a temporary
    folder whose files are uploaded beside `prefix` when the block ends
    without error."""
    if not is_remote(prefix):
        makedirs(parent(prefix))
        yield local(prefix)
        return
    with tempfile.TemporaryDirectory(prefix="kjax-") as tmp:
        yield os.path.join(tmp, name(prefix))
        for f in sorted(os.listdir(tmp)):
            upload(os.path.join(tmp, f), join(parent(prefix), f))


@contextlib.contextmanager
def staged_dir(path: str) -> Iterator[str]:
    """A local folder to write outputs into: `path` itself when local, else a
    temporary folder uploaded to `path` when the block ends without error."""
    if not is_remote(path):
        makedirs(path)
        yield local(path)
        return
    with tempfile.TemporaryDirectory(prefix="kjax-out-") as tmp:
        yield tmp
        copy_tree(tmp, path)


def cache_root() -> str:
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "kjax")


def cached_copy(path: str, kind: str = "files") -> str:
    """A local copy of a remote file in this host's cache (KJAX_CACHE_DIR),
    downloaded once and reused while the remote object is unchanged (its
    fsspec checksum is part of the cached name). Local paths are returned
    as they are. Processes that share the cache may race: each download
    lands under a temporary name and is renamed into place."""
    if not is_remote(path):
        return local(path)
    fs, bare = _fs(path)
    folder = hashlib.sha1(parent(path).encode()).hexdigest()[:16]
    stem, dot, ext = name(path).rpartition(".")
    version = format(int(fs.checksum(bare)) & (2 ** 64 - 1), "016x")
    target = os.path.join(cache_root(), kind, folder,
                          f"{stem}.{version}.{ext}" if dot else f"{name(path)}.{version}")
    if not os.path.exists(target):
        download(path, target)
    return target
