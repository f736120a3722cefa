"""llm layer of rise_batch."""
