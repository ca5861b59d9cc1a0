"""Jaeger's query API: the adapter (``reader``) and its configuration (``config``)."""
