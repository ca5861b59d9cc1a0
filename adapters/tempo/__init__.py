"""Grafana Tempo: the adapter (``reader``) and its configuration (``config``)."""
