"""space layer of rise_batch."""
