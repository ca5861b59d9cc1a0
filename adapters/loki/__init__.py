"""Grafana Loki: the adapter (``reader``) and its configuration (``config``)."""
