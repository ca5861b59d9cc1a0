"""Changes from an HTTP JSON change feed:
the adapter (``reader``) and its configuration (``config``)."""
