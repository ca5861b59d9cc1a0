"""The LLM reasoner: any OpenAI-compatible chat-completions model as the agent's brain.

ChatClient          the httpx client (retries, Retry-After, usage, redaction before the wire)
LLMReasoner         proposes, acts, reflects; the judge and the loop's budgets keep it honest
FunctionModel, ScriptedModel, RecordedModel, follow_hints
                    fake models behind the HTTP API, for tests and demos
load_prompts        the prompts (package data), validated
"""

from opsagent.llm.client import ChatClient, ChatRequest, ChatResult
from opsagent.llm.errors import BudgetRefused, ModelConfigError, ModelError, ModelRejected, ModelUnavailable
from opsagent.llm.fake import FunctionModel, ModelReply, ModelRequest, RecordedModel, ScriptedModel, follow_hints
from opsagent.llm.prompts import PromptError, Prompts, default_prompts, load_prompts
from opsagent.llm.reasoner import LLMReasoner

__all__ = [
    "BudgetRefused",
    "ChatClient",
    "ChatRequest",
    "ChatResult",
    "FunctionModel",
    "LLMReasoner",
    "ModelConfigError",
    "ModelError",
    "ModelRejected",
    "ModelReply",
    "ModelRequest",
    "ModelUnavailable",
    "PromptError",
    "Prompts",
    "RecordedModel",
    "ScriptedModel",
    "default_prompts",
    "follow_hints",
    "load_prompts",
]
