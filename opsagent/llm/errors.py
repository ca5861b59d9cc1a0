"""What can go wrong talking to a model, as the project's own exceptions.

httpx's exceptions and HTTP statuses are translated once, in the client, with ``raise … from exc``.
Output the model can fix (bad JSON, an unknown tool) is not an exception at all: it goes back to the
model as a message or to the loop as an observation, like pydantic-ai's ``ModelRetry``.

    OpsAgentError
    ├── UserError
    │   └── ModelConfigError      401/403/404: the key, the model name or the URL is wrong; stops the run
    └── ModelError                this call got no usable answer; the playbook reasoner stands in
        ├── ModelUnavailable      connection error, timeout, 429 or 5xx after every retry
        ├── ModelRejected         the server refused this request (400, 413, 422: too long, bad field)
        └── BudgetRefused         the call would overrun the investigation's token or time budget
"""

from __future__ import annotations

from opsagent.errors import OpsAgentError, UserError


class ModelConfigError(UserError):
    """The endpoint refuses us whatever we send: fix the configuration."""


class ModelError(OpsAgentError):
    """One call to the model failed; the investigation goes on without the model's answer."""


class ModelUnavailable(ModelError):
    pass


class ModelRejected(ModelError):
    pass


class BudgetRefused(ModelError):
    pass
