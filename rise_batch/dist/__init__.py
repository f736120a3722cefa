"""dist layer of rise_batch."""
