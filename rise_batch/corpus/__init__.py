"""Corpus input: readers (one per format), the up-front scan and shard plan, and the docid -> relpath map."""
