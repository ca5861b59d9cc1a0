"""Log summaries: what a strong SRE would read instead of ten thousand raw lines.

A :class:`Summariser` takes log records and the incident's baseline and window and returns a
:class:`~opsagent.models.LogsData`: exact counts by level, service and keyword family, a time
histogram, templates mined as the lines stream past (with the values their variable positions
held), what is new, bursting or vanished, and the lines worth reading whole. :func:`render` turns
it into text under a token budget. Nothing here truncates a line or drops a count.

Modules, one noun each: :mod:`.levels` (spellings of a severity), :mod:`.families` (keyword
families), :mod:`.masking` (variable parts of a message), :mod:`.mining` (templates),
:mod:`.lines` (raw text lines to records), :mod:`.summary` (the summariser), :mod:`.render`.
"""

from opsagent.logsummary.families import FAMILIES, families_of
from opsagent.logsummary.levels import LEVELS, normalise_level
from opsagent.logsummary.lines import LineParser, LogLine
from opsagent.logsummary.masking import Masker, mask
from opsagent.logsummary.mining import WILDCARD, Template, TemplateMiner
from opsagent.logsummary.render import DEFAULT_BUDGET_TOKENS, render
from opsagent.logsummary.summary import LogLike, LogSummariser, Summariser, template_id

#: The name the replay source and older callers use.
SimpleSummariser = LogSummariser

__all__ = [
    "DEFAULT_BUDGET_TOKENS",
    "FAMILIES",
    "LEVELS",
    "WILDCARD",
    "LineParser",
    "LogLike",
    "LogLine",
    "LogSummariser",
    "Masker",
    "SimpleSummariser",
    "Summariser",
    "Template",
    "TemplateMiner",
    "families_of",
    "mask",
    "normalise_level",
    "render",
    "template_id",
]
