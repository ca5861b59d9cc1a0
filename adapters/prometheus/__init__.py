"""Prometheus: the reader over its HTTP API (``reader``) and its configuration (``config``)."""
