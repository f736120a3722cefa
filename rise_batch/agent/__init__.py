"""agent layer of rise_batch."""
