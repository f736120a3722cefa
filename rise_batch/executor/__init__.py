"""Executors: map a stage's per-item function over items, in process or on Ray. Only this package imports ray."""
