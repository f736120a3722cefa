"""The structuring job: scan, per-shard pipeline, verified checkpoint, Batch API mode, cost plan and budget."""
