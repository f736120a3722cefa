"""The `st:` embedder: a local sentence-transformers model kept busy (the GPU's time is the build's time).

`SentenceTransformer.encode` tokenizes a batch, then runs the model on it, then tokenizes the next: the device idles
while the CPU tokenizes (on a GPU, tokenizing 200-word passages takes longer than the model: one core tokenizes
~10,000 a second). Here a shard's texts are handed over whole (`chunk`) and sorted by length, longest first, so each
batch pads to about its own length (as `encode` sorts too), and threads tokenize the next batches side by side (the
fast tokenizers release the GIL) while the model runs the current one. On a CUDA device the model runs in half
precision (the index keeps float16 rows anyway), 512 passages a batch; on CPU in float32, 32 a batch, as `encode`
does, so the two paths give the same vectors there (tested). On 2 busy CPU cores, where torch's threads take every
core, the two run at the same speed (MiniLM: 8.5 and 8.8 passages/s, bench/embed_throughput.py); the threads are
for a device that waits on the CPU.

One model per process and one process per GPU: on a cluster, `index --ray --gpus 1` asks one GPU of each embedding
task, and Ray's CUDA_VISIBLE_DEVICES gives each task's process its own device.
"""

from __future__ import annotations

import hashlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rise_batch.errors import ConfigError
from rise_batch.index.embedders import Embedder, EmbedderSpec, MissingExtraError, file_sha256, module_version

if TYPE_CHECKING:
    import numpy as np

CPU_BATCH = 32  # encode's own default: on CPU a larger batch only pads more
GPU_BATCH = 512
PREFETCH = 3  # batches tokenized ahead of the model


class StEmbedder(Embedder):
    """A sentence-transformers model with tokenization beside the model, length-sorted batches and fp16 on CUDA."""

    chunk = 1 << 30  # a shard's texts at once: sorted and batched here

    def __init__(self, spec: EmbedderSpec, model: Any, digest: str, dim: int, version: str) -> None:
        super().__init__(spec, model, digest, dim, version)
        import torch

        self.device = model.device
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            model.half()
        self.batch = GPU_BATCH if self.cuda else CPU_BATCH
        self.prefetch = PREFETCH  # batches tokenized ahead (0: in turn with the model, as encode does)
        self._torch = torch
        self._pool = ThreadPoolExecutor(PREFETCH, thread_name_prefix="st-tokenize")  # batches tokenized side by side

    def embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        order = np.argsort([-len(t) for t in texts], kind="stable")
        batches = [order[i : i + self.batch] for i in range(0, len(order), self.batch)]
        if not self.prefetch:
            for rows in batches:
                out[rows] = self._forward(self._tokenize(texts, rows))
            return out
        ahead: deque = deque()
        for rows in batches[: self.prefetch]:
            ahead.append(self._pool.submit(self._tokenize, texts, rows))
        for k, rows in enumerate(batches):
            features = ahead.popleft().result()
            if k + self.prefetch < len(batches):
                ahead.append(self._pool.submit(self._tokenize, texts, batches[k + self.prefetch]))
            out[rows] = self._forward(features)
        return out

    def _tokenize(self, texts: list[str], rows: Any) -> dict[str, Any]:
        """One batch's model inputs, on the device (pinned and copied without blocking on CUDA)."""
        features = self._impl.preprocess([texts[i] for i in rows])
        if self.cuda:
            return {
                k: v.pin_memory().to(self.device, non_blocking=True) if hasattr(v, "pin_memory") else v
                for k, v in features.items()
            }
        return features

    def _forward(self, features: dict[str, Any]) -> np.ndarray:
        torch = self._torch
        with torch.inference_mode():
            emb = self._impl(features)["sentence_embedding"]
            emb = torch.nn.functional.normalize(emb.float(), p=2, dim=1)
        return emb.cpu().numpy()


def load_st(spec: EmbedderSpec) -> Embedder:
    """The model directory of `spec` (local files only), its weights digested for the index's identity."""
    try:
        import sentence_transformers
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise MissingExtraError(
            f"embedder {spec}: needs sentence-transformers (pip install sentence-transformers)"
        ) from None
    path = Path(spec.name)
    if not path.is_dir():
        raise ConfigError(f"embedder {spec}: {path} is not a local sentence-transformers model directory")
    model = SentenceTransformer(str(path), local_files_only=True)
    if spec.max_tokens:
        model.max_seq_length = spec.max_tokens
    model.eval()
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".safetensors", ".bin", ".json")):
        digest.update(f.relative_to(path).as_posix().encode() + b"\0" + file_sha256(f).encode())
    dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = int(dimension())
    spec2 = EmbedderSpec(spec.kind, spec.name, dim, spec.max_tokens)
    return StEmbedder(spec2, model, digest.hexdigest(), dim, module_version(sentence_transformers))
