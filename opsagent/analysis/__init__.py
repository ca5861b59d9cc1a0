"""What the live and replay sources share: statistics over series, spans, changes and logs.

Adapters fetch, the engine computes: every function here is pure, over the recorded-incident models
(:mod:`opsagent.fixtures`), so the same telemetry gives the same observation from a recording and
from a live system.
"""
