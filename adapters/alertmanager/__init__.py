"""Alertmanager, as a source of triggers (what is firing):
the adapter (``client``) and its configuration (``config``)."""
