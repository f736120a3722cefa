"""Storage every node sees: one small task per alive node checks the job's paths before its first item.

On one machine every worker shares the driver's disk; on a cluster a POSIX path can name another directory on each
node (a node-local disk, a stale rsync of the working directory). Workers would then write where the driver never
looks and the job would report success with files missing. So before a multi-node job starts, the driver asks every
alive node, with a task pinned to it (node affinity, not soft, no CPU reserved):

- for an OUTPUT directory (every worker writes there, the driver reads it): the driver writes a random token under
  it, each node reads it and writes one back, the driver reads every node's reply. A node that does not see the
  token, or whose reply the driver does not see, sees another directory: refused in one line naming node and path;
- for an INPUT (the corpus, an index, a docs directory): a per-node copy is a legitimate setup, so each node
  returns a cheap fingerprint of what it sees there (sizes and digests of the few files that identify it, never
  mtimes, which a copy changes) and the driver compares it with its own. A node that sees another input, or none,
  is refused the same way.

Skipped for a local Ray and a one-node cluster (nothing to compare) and for object-store URIs (s3://: every node
reads the same bucket). The probe files are removed afterwards, whatever the outcome.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from rise_batch.corpus.readers import list_sources
from rise_batch.errors import StorageError
from rise_batch.io import make_output_dir

PROBE_DIR = ".rise-storage-probe-"  # + the token: a leftover of a killed driver is recognisable and harmless
TIMEOUT_S = 300.0  # a node whose task does not answer by then is refused (a worker can take a while to start)
REMEDY = "use a shared filesystem or an s3:// path"
_EDGE = 1 << 20  # bytes of each end of a corpus file in its fingerprint (a Parquet footer lives at the end)


class Output(NamedTuple):
    label: str  # how the user names it: "OUT", "the run directory (--out)"
    path: str


class Input(NamedTuple):
    label: str  # "the corpus (--corpus)", "the docs directory (--docs)"
    path: str
    kind: str  # a key of FINGERPRINTS


def _digest(h: Any, path: Path, edge: int | None = None) -> None:
    """Feed `path`'s size and bytes (only its first and last `edge` bytes when given) into `h`."""
    size = path.stat().st_size
    h.update(f"{path.name}\0{size}\0".encode())
    with open(path, "rb") as f:
        if edge is None or size <= 2 * edge:
            while chunk := f.read(1 << 20):
                h.update(chunk)
            return
        h.update(f.read(edge))
        f.seek(size - edge)
        h.update(f.read(edge))


def corpus_fingerprint(path: str) -> str:
    """The corpus files' names (relative to the corpus path), sizes and first and last MiB: a copy on another node
    matches, a different or truncated file does not. (corpus.scan.corpus_fingerprint hashes mtimes and resolved
    paths, which a per-node copy changes: right for noticing a changed corpus, wrong for comparing nodes.)"""
    root = Path(path)
    h = hashlib.blake2b(digest_size=8)
    for src in list_sources(root):
        h.update(str(src.relative_to(root) if root.is_dir() else src.name).encode() + b"\n")
        _digest(h, src, _EDGE)
    return h.hexdigest()


def _files_fingerprint(path: str, names: Sequence[str]) -> str:
    """Digest of those of `names` present under `path`; FileNotFoundError when none is."""
    h = hashlib.blake2b(digest_size=8)
    found = [Path(path) / n for n in names if (Path(path) / n).is_file()]
    if not found:
        raise FileNotFoundError(f"{path}: none of {', '.join(names)}")
    for f in found:
        _digest(h, f)
    return h.hexdigest()


def docs_fingerprint(path: str) -> str:
    """A structured docs directory: its docmap.parquet and, for a structure output, its manifest.json."""
    if not (Path(path) / "docmap.parquet").is_file():
        raise FileNotFoundError(f"{path}/docmap.parquet")
    return _files_fingerprint(path, ("docmap.parquet", "manifest.json"))


def index_fingerprint(path: str) -> str:
    """An index directory: docids.json (every index holds it) and its parts' records, meta.json at the top (BM25's)
    and in each part's folder (dense/meta.json), those present; by file name, as the registry of parts sits in a
    layer above this one (rise_batch/index/retriever_kinds.py)."""
    parts = sorted(p.relative_to(path).as_posix() for p in Path(path).glob("*/meta.json"))
    return _files_fingerprint(path, ("meta.json", "docids.json", *parts))


FINGERPRINTS: Mapping[str, Callable[[str], str]] = {
    "corpus": corpus_fingerprint,
    "docs": docs_fingerprint,
    "index": index_fingerprint,
}


def _seen(kind: str, path: str) -> str | None:
    try:
        return FINGERPRINTS[kind](path)
    except (OSError, ValueError):  # missing, unreadable, or not a corpus at all on this node
        return None


def _on_node(outputs: Sequence[str], inputs: Sequence[tuple[str, str]], token: str) -> dict[str, Any]:
    """The task each node runs: for each output, whether it sees the driver's token (and then writes its reply);
    for each input, its fingerprint (None: missing). Writes nothing where it does not see the token."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    saw = []
    for out in outputs:
        probe = Path(out) / f"{PROBE_DIR}{token}"
        try:
            same = (probe / "token").read_text() == token
        except OSError:
            same = False
        if same:
            (probe / node).write_text(token)
        saw.append(same)
    return {"outputs": saw, "inputs": [_seen(kind, path) for path, kind in inputs]}


def _posix(path: str) -> bool:
    return "://" not in path


def node_label(node: Mapping[str, Any]) -> str:
    """How messages name a node: its IP and the start of its id ("10.0.0.7 (ab12cd)"), as `ray status` shows it."""
    return f"{node.get('NodeManagerAddress', '?')} ({node['NodeID'][:6]})"


def node_labels() -> dict[str, str]:
    """Node id -> label, for every node the cluster has known (alive or not), for the stats' per-node counts."""
    import ray

    return {n["NodeID"]: node_label(n) for n in ray.nodes()}


def check_storage(
    address: str | None, outputs: Sequence[Output] = (), inputs: Sequence[Input] = (), env: Sequence[str] = ()
) -> None:
    """Refuse, in one line, a POSIX output or input that not every alive node of the cluster sees alike.

    `address` is the job's --ray-address; without one (and without RAY_ADDRESS) the job starts a local Ray, one
    node, and nothing is probed. Output directories are created if need be (the driver writes its token there).
    `env`: the variables the job's actors need (its API key's name), as the executor will lend them: the probe is
    the job's first connection, and Ray takes a runtime env only when a process connects.
    """
    outputs = [o for o in outputs if _posix(o.path)]
    inputs = [i for i in inputs if _posix(i.path)]
    if not (outputs or inputs) or not (address or os.environ.get("RAY_ADDRESS")):
        return
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rise_batch.executor.ray import init_ray  # lazy: loads ray (Ray runs only)

    init_ray(address, env=env)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) < 2:
        return
    token = secrets.token_hex(8)
    expected = [FINGERPRINTS[i.kind](i.path) for i in inputs]  # the driver's own view; its errors are the job's
    probes = [Path(o.path) / f"{PROBE_DIR}{token}" for o in outputs]
    try:
        for probe in probes:
            make_output_dir(probe.parent)  # a command that then fails removes it again, as it would its own
            probe.mkdir()
            (probe / "token").write_text(token)
        task = ray.remote(num_cpus=0, max_retries=0)(_on_node)
        args = ([o.path for o in outputs], [(i.path, i.kind) for i in inputs], token)
        refs = {
            task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(*args): n
            for n in nodes
        }
        done, late = ray.wait(list(refs), num_returns=len(refs), timeout=TIMEOUT_S)
        if late:
            raise StorageError(
                f"node {node_label(refs[late[0]])} did not answer the storage probe in {TIMEOUT_S:.0f} s; check that "
                "the node is healthy (`ray status`), or remove it from the cluster"
            )
        for ref in done:
            node, seen = refs[ref], ray.get(ref)
            for out, probe, same in zip(outputs, probes, seen["outputs"], strict=True):
                if not same or not (probe / node["NodeID"]).is_file():
                    raise StorageError(
                        f"{out.label} is not on storage every node sees: node {node_label(node)} sees another "
                        f"{out.path}; {REMEDY}"
                    )
            for inp, want, got in zip(inputs, expected, seen["inputs"], strict=True):
                if got != want:
                    what = "no" if got is None else "another"
                    raise StorageError(
                        f"{inp.label} differs between nodes: node {node_label(node)} sees {what} {inp.path}; copy "
                        f"the same files to every node, or {REMEDY}"
                    )
    finally:
        for probe in probes:
            shutil.rmtree(probe, ignore_errors=True)
