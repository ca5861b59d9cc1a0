"""Data sources: one adapter per system, each behind a narrow read-only protocol for its kind."""
