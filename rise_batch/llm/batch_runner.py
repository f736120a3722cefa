"""Run groups of requests through the OpenAI Batch API, resumably: requests (custom_id, body) in, results out.

Any job that wants half-price, no-rate-limit calls (structuring, judging) calls this with its own request bodies
and names each group of requests; the runner owns everything between: packing into files within the API's limits,
upload, batch creation, polling, downloading output and error files, and a manifest (`batches.json`, written
atomically after every step) so that a killed driver, re-run, *resumes* each group where it stood instead of
submitting it again:

- a group already recorded is never re-packed: its files were written to disk before anything was uploaded;
- a file uploaded but whose batch creation was not recorded is looked up among the server's batches by input
  file id before it is created (a kill between `batches.create` and the manifest write must not pay twice);
- results are downloaded once into the work directory and read from there afterwards.

Group names must be file-name safe; pick them deterministically from the work (e.g. "pack-00003.r0") so a resumed
caller asks for the same group again. Usage: `results = await runner.run("judge-r0", requests)` where results maps
every custom_id to a `BatchResult` (requests absent from both result files come back as failed, `missing`/`batch_*`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from rise_batch.corpus.docmap import check_relpath
from rise_batch.io import dump_json, read_json, write_bytes_atomic
from rise_batch.llm.batch import (
    ENDPOINT,
    MAX_BYTES,
    MAX_REQUESTS,
    BatchResult,
    line_custom_id,
    missing_result,
    pack_lines,
    parse_results,
)
from rise_batch.storage import AnyPath, location

log = logging.getLogger(__name__)
TERMINAL = ("completed", "failed", "expired", "cancelled")
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}")


class BatchRunner:
    """One manifest (work_dir/batches.json) and its local files (work_dir/batches/); see the module docstring."""

    def __init__(
        self,
        client: Any,  # openai.AsyncOpenAI (or anything with the same files/batches methods)
        work_dir: str | AnyPath,
        *,
        endpoint: str = ENDPOINT,
        completion_window: str = "24h",
        poll_s: float = 30.0,
        max_requests: int = MAX_REQUESTS,
        max_bytes: int = MAX_BYTES,
        keep_inputs: bool = False,
        metadata: dict[str, str] | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.client = client
        self.root = location(work_dir)  # in object storage too: batches.json and every file is then a whole object
        self.dir = self.root / "batches"
        self.manifest_path = self.root / "batches.json"
        self.endpoint, self.completion_window, self.poll_s = endpoint, completion_window, poll_s
        self.max_requests, self.max_bytes = max_requests, max_bytes
        self.keep_inputs = keep_inputs
        self.metadata = dict(metadata or {})
        self._sleep = sleep
        self._server_batches: dict[str, Any] | None = None  # input_file_id -> batch, listed once per process
        self.manifest: dict[str, Any] = {"version": 1, "endpoint": endpoint, "groups": {}}
        if self.manifest_path.exists():
            self.manifest = read_json(self.manifest_path)
            if self.manifest.get("endpoint", endpoint) != endpoint:
                raise ValueError(f"{self.manifest_path} holds batches for {self.manifest['endpoint']}, not {endpoint}")
            self._check_names()

    # -- manifest ---------------------------------------------------------------------------------------------
    def _check_names(self) -> None:
        """File names read from batches.json are joined to batches/ and written to: checked before any use."""
        remedy = "restore the file or fix the name (the runner writes <group>.f<N>); deleting it re-pays its batches"
        for group, g in self.manifest.get("groups", {}).items():
            where = f"{self.manifest_path}: group {group!r}"
            check_relpath(group, where, remedy)
            for entry in g.get("files", []):
                check_relpath(entry.get("name"), f"{where}: file", remedy)

    @property
    def groups(self) -> dict[str, dict[str, Any]]:
        return self.manifest["groups"]

    def _save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        dump_json(self.manifest, self.manifest_path)

    def has(self, group: str) -> bool:
        return group in self.groups

    def meta(self, group: str) -> dict[str, Any]:
        return self.groups[group].get("meta", {})

    def is_finished(self, group: str) -> bool:
        """Every file of the group reached a terminal state and its results are on local disk."""
        return all(f["status"] in TERMINAL and f.get("downloaded") for f in self.groups[group]["files"])

    def batch_ids(self, group: str) -> list[str]:
        return [f["batch_id"] for f in self.groups[group]["files"] if f.get("batch_id")]

    # -- submit -----------------------------------------------------------------------------------------------
    async def submit(
        self, group: str, requests: Iterable[tuple[str, dict[str, Any]]], meta: dict[str, Any] | None = None
    ) -> list[str]:
        """Pack (first time only), upload and create the group's batches; returns their ids. Idempotent."""
        if not _SAFE.fullmatch(group):
            raise ValueError(f"group name {group!r} must match {_SAFE.pattern}")
        if group not in self.groups:
            self._pack(group, requests, meta or {})
        for entry in self.groups[group]["files"]:
            await self._launch(group, entry)
        return self.batch_ids(group)

    def _pack(self, group: str, requests: Iterable[tuple[str, dict[str, Any]]], meta: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        files = []
        packed = pack_lines(requests, url=self.endpoint, max_requests=self.max_requests, max_bytes=self.max_bytes)
        for i, lines in enumerate(packed):
            name = f"{group}.f{i}"
            write_bytes_atomic(self.dir / f"{name}.jsonl", b"".join(lines))
            ids = "".join(line_custom_id(x) + "\n" for x in lines)
            write_bytes_atomic(self.dir / f"{name}.ids", ids.encode("utf-8"))
            files.append({"name": name, "n": len(lines), "bytes": sum(map(len, lines)), "status": "packed"})
        self.groups[group] = {"meta": meta, "created": _now(), "files": files}
        self._save()  # the group exists from here on: a resume uploads these files, it never re-packs

    async def _launch(self, group: str, entry: dict[str, Any]) -> None:
        if entry.get("batch_id"):
            return
        if not entry.get("input_file_id"):
            with (self.dir / f"{entry['name']}.jsonl").open("rb") as fh:
                uploaded = await self.client.files.create(file=(f"{entry['name']}.jsonl", fh), purpose="batch")
            entry.update(input_file_id=uploaded.id, status="uploaded")
            self._save()
        else:  # uploaded by a killed run: its batch may exist although the manifest never heard of it
            found = await self._find_batch(entry["input_file_id"])
            if found is not None:
                log.info("batch %s of %s adopted from the server (created before a restart)", found.id, entry["name"])
                self._record(entry, found)
                self._save()
                return
        metadata = {**self.metadata, "rise_batch_file": entry["name"]}
        once = self.client.with_options(max_retries=0) if hasattr(self.client, "with_options") else self.client
        try:  # never retried blindly: a create that timed out may have happened, and would be paid twice
            batch = await once.batches.create(
                input_file_id=entry["input_file_id"],
                endpoint=self.endpoint,
                completion_window=self.completion_window,
                metadata=metadata,
            )
        except Exception:
            self._server_batches = None
            batch = await self._find_batch(entry["input_file_id"])
            if batch is None:
                raise
        self._record(entry, batch)
        self._save()
        if not self.keep_inputs:
            (self.dir / f"{entry['name']}.jsonl").unlink(missing_ok=True)

    async def _find_batch(self, input_file_id: str) -> Any | None:
        if self._server_batches is None:
            self._server_batches = {}
            async for b in self.client.batches.list(limit=100):
                self._server_batches.setdefault(b.input_file_id, b)
        return self._server_batches.get(input_file_id)

    @staticmethod
    def _record(entry: dict[str, Any], batch: Any) -> None:
        counts = getattr(batch, "request_counts", None)
        errors = getattr(getattr(batch, "errors", None), "data", None) or []
        entry.update(
            batch_id=batch.id,
            status=batch.status,
            output_file_id=getattr(batch, "output_file_id", None),
            error_file_id=getattr(batch, "error_file_id", None),
            request_counts=counts.model_dump() if counts is not None else {},
            errors=[f"{getattr(e, 'code', '')}: {getattr(e, 'message', '')}" for e in errors][:20],
        )

    # -- poll and collect -------------------------------------------------------------------------------------
    async def refresh(self, group: str) -> bool:
        """Poll the group's unfinished batches once, download finished ones' results; True when all are done."""
        changed = False
        for entry in self.groups[group]["files"]:
            if not entry.get("batch_id"):
                raise RuntimeError(f"group {group!r} has a file without a batch: call submit() first")
            if entry["status"] not in TERMINAL:
                batch = await self.client.batches.retrieve(entry["batch_id"])
                if batch.status != entry["status"]:
                    log.info("batch %s (%s): %s -> %s", batch.id, entry["name"], entry["status"], batch.status)
                self._record(entry, batch)
                changed = True
            if entry["status"] in TERMINAL and not entry.get("downloaded"):
                for kind in ("output", "error"):
                    file_id = entry.get(f"{kind}_file_id")
                    data = await self._download(file_id) if file_id else b""
                    write_bytes_atomic(self.dir / f"{entry['name']}.{kind}.jsonl", data)
                entry["downloaded"] = True
                changed = True
        if changed:
            self._save()
        return self.is_finished(group)

    async def _download(self, file_id: str) -> bytes:
        response = await self.client.files.content(file_id)
        return response.content if hasattr(response, "content") else bytes(response)

    async def wait(self, group: str) -> dict[str, BatchResult]:
        while not await self.refresh(group):
            await self._sleep(self.poll_s)
        return self.results(group)

    async def run(
        self, group: str, requests: Iterable[tuple[str, dict[str, Any]]], meta: dict[str, Any] | None = None
    ) -> dict[str, BatchResult]:
        """submit + wait: every custom_id of the group -> its result (a resumed call re-submits nothing)."""
        await self.submit(group, requests, meta)
        return await self.wait(group)

    def results(self, group: str) -> dict[str, BatchResult]:
        """The results of a finished group, read from local files; requests with no result line are failures."""
        out: dict[str, BatchResult] = {}
        for entry in self.groups[group]["files"]:
            ids = self._ids(entry)
            got: dict[str, BatchResult] = {}
            for kind in ("error", "output"):  # output last: a line reported in both counts as answered
                path = self.dir / f"{entry['name']}.{kind}.jsonl"
                for r in parse_results(path.read_bytes()) if path.exists() else ():
                    if r.ok or r.custom_id not in got:
                        got[r.custom_id] = r
            for cid in ids:
                out[cid] = got.get(cid) or missing_result(cid, entry["status"])
        return out

    def custom_ids(self, group: str) -> list[str]:
        return [cid for e in self.groups[group]["files"] for cid in self._ids(e)]

    def _ids(self, entry: dict[str, Any]) -> list[str]:
        text = (self.dir / f"{entry['name']}.ids").read_text(encoding="utf-8")
        return [x for x in text.split("\n") if x]  # custom_ids hold no "\n" (pack_lines refuses them)

    async def cancel(self, group: str) -> None:
        for entry in self.groups[group]["files"]:
            if entry.get("batch_id") and entry["status"] not in TERMINAL:
                self._record(entry, await self.client.batches.cancel(entry["batch_id"]))
        self._save()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def async_client(base_url: str | None, api_key: str, timeout_s: float = 600.0) -> Any:
    """The openai client for files and batches; the SDK's own retries are fine here (uploads, polls: idempotent)."""
    import openai

    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=5, timeout=timeout_s)
