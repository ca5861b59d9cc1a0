"""The Kubernetes API, read-only: the adapter (``reader``) and its configuration (``config``)."""
