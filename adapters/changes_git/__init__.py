"""Changes from a git repository (GitOps, configuration):
the adapter (``reader``) and its configuration (``config``)."""
