"""rise_batch: TOC structuring, BM25 indexing and agent trajectories for RISE at 1M-document scale.

Nothing is imported here on purpose: `import rise_batch` must stay cheap (no Ray, no numpy) so that the CLI
starts fast and workers only pay for what they use.
"""

__version__ = "0.1.0"
