"""commands layer of rise_batch."""
