"""eval layer of rise_batch."""
