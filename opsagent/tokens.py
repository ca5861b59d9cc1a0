"""The project's one token estimator: what budgets, reports and benchmarks count as tokens.

Every count of tokens in opsagent comes from :func:`estimate_tokens`: an observation's text, a
reasoner's thought, a log summary held to its budget, a model's prompt where the server reports no
usage, the scripted models' usage. So every strategy's tokens are counted alike, whichever reasoner
runs. It is the usual estimate (about four characters a token for English and telemetry text), not a
tokenizer: opsagent talks to any OpenAI-compatible server and cannot know the model's vocabulary.

A model call is checked against the budget before it is made; there the estimate must not fall
short of what the server will count, so it is asked with ``chars_per_token=`` :data:`CONSERVATIVE`
(JSON and identifiers tokenise worse than prose). This module imports nothing of the project's.
"""

from __future__ import annotations

#: Characters a token, on average, in the text opsagent reads and writes.
CHARS_PER_TOKEN = 4
#: Characters a token where an estimate must not fall short (a prompt checked against the budget).
CONSERVATIVE = 3


def estimate_tokens(text: str, *, chars_per_token: int = CHARS_PER_TOKEN) -> int:
    """Tokens in ``text``, rounded up; at least one."""
    return max(1, -(-len(text) // chars_per_token))


def chars_for(tokens: int, *, chars_per_token: int = CHARS_PER_TOKEN) -> int:
    """How many characters fit in ``tokens`` (to cut a text to a budget)."""
    return tokens * chars_per_token
