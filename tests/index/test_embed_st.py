"""The `st:` embedder's path (length-sorted batches, tokenization in threads beside the model) gives what
sentence-transformers' own `encode` gives, row for row, on a real (tiny, randomly initialised) BERT model made here:
no model is downloaded. Skipped where sentence-transformers is not installed (extra `.[minilm]`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")

WORDS = "the a city river capital france lyon paris rhone flows from into largest of on and is in".split()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide BERT with a WordPiece vocabulary of a few words, saved as a sentence-transformers dir."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    root = tmp_path_factory.mktemp("tiny-bert")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(WORDS) + 5, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)  # fmt: skip
    BertModel(config).save_pretrained(root / "bert")
    BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(root / "bert")
    word = models.Transformer(str(root / "bert"), max_seq_length=96)
    st = SentenceTransformer(modules=[word, models.Pooling(word.get_word_embedding_dimension())], device="cpu")
    st.save(str(root / "st"))
    return root / "st"


def test_our_path_equals_bare_encode_row_for_row(tiny_model):
    from sentence_transformers import SentenceTransformer

    from rise_batch.index.embedders import load_embedder

    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS, size=int(n))) for n in rng.integers(1, 120, size=150)]  # > 2 batches
    ours = load_embedder(f"st:{tiny_model}")
    assert ours.dim == 32 and ours.chunk > len(texts)  # a shard's passages at once: sorted and batched inside
    got = ours.embed(texts)
    bare = SentenceTransformer(str(tiny_model), device="cpu", local_files_only=True)
    want = bare.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    ours.prefetch = 0  # the tokenizer in turn with the model, as encode's
    np.testing.assert_allclose(ours.embed(texts), got, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert ours.embed([]).shape == (0, 32)
    assert ours.identity()["embedder"] == f"st:{tiny_model}" and len(ours.identity()["weights_sha256"]) == 64
