"""structure layer of rise_batch."""
