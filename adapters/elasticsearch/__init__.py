"""Elasticsearch and OpenSearch: the adapter (``reader``) and its configuration (``config``)."""
