"""What the command line needs from the LLM reasoner: build it from settings and flags, show prompts.

``opsagent.cli`` wires it: ``opsagent prompts REPORT.json`` (:mod:`opsagent.cli.prompts`) prints
:func:`print_prompts` of a saved JSON report, and ``investigate`` takes ``--reasoner llm`` with
:func:`build_reasoner` and prints :func:`print_prompts` under ``--show-prompts``.

A base URL ``fake://follow-hints`` selects the scripted model that ships in the package, for demos
with no server (``opsagent investigate FIXTURE --reasoner llm --base-url fake://follow-hints``).
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from opsagent.llm.client import ChatClient
from opsagent.llm.errors import ModelConfigError
from opsagent.llm.fake import FunctionModel, follow_hints
from opsagent.llm.reasoner import LLMReasoner
from opsagent.models import ModelExchange, PromptMessage, Report
from opsagent.playbooks import Playbook
from opsagent.report import model_summary
from opsagent.settings import Settings

FAKE_SCHEME = "fake://"
FAKE_MODELS = {"follow-hints": follow_hints}


def build_reasoner(
    settings: Settings,
    playbooks: Sequence[Playbook],
    *,
    model: str | None = None,
    base_url: str | None = None,
    mode: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> LLMReasoner:
    """The LLM reasoner from the configuration, flags winning; the key only from the environment."""
    updates: dict[str, str] = {}
    if model:
        updates["model"] = model
    if base_url:
        updates["base_url"] = base_url
    if mode:
        updates["mode"] = mode
    try:
        llm = settings.llm.model_validate(settings.llm.model_dump() | updates)
    except ValidationError as exc:
        raise ModelConfigError(f"invalid LLM option: {exc.errors()[0]['msg']}") from exc
    if llm.base_url.startswith(FAKE_SCHEME):
        name = llm.base_url.removeprefix(FAKE_SCHEME).strip("/")
        if name not in FAKE_MODELS:
            raise ModelConfigError(f"no fake model {name!r}; one of: {', '.join(FAKE_MODELS)}")
        transport = transport or FunctionModel(FAKE_MODELS[name]).transport()
        llm = llm.model_copy(update={"model": llm.model or name, "base_url": "http://fake.invalid/v1"})
    client = ChatClient.from_settings(llm, api_key=settings.llm_api_key, transport=transport)
    return LLMReasoner(client=client, playbooks=playbooks, settings=llm)


def _message(m: PromptMessage) -> Text:
    text = Text()
    text.append(f"[{m.role}]" + (f" (for {m.tool_call_id})" if m.tool_call_id else "") + "\n", style="bold cyan")
    if m.content:
        text.append(m.content + "\n")
    for c in m.tool_calls:
        text.append(f"→ {c.name}({c.arguments}) [{c.id}]\n", style="magenta")
    return text


def _exchange(x: ModelExchange, *, new_only: bool) -> Panel:
    title = f"#{x.index} {x.purpose}" + (f" · {x.hypothesis_id}" if x.hypothesis_id else "")
    facts = (
        f"{x.prompt_tokens} prompt + {x.completion_tokens} completion tokens"
        + (" (estimated)" if x.usage_estimated else "")
        + f" · {x.attempts} attempt(s) · {x.latency_ms:.0f} ms"
        + (f" · {x.redactions} secret(s) redacted" if x.redactions else "")
    )
    body = Text(facts + "\n", style="dim")
    shown = x.request
    if new_only and len(shown) > 2:  # the system prompt and task repeat; show what this turn added
        last_reply = max((i for i, m in enumerate(shown) if m.role == "assistant"), default=1)
        shown = shown[last_reply + 1 :] if last_reply > 1 else shown
    for m in shown:
        body.append_text(_message(m))
    if x.error:
        body.append(f"error: {x.error}\n", style="bold red")
    elif x.reply is not None:
        body.append("── reply " + (f"({x.finish_reason})" if x.finish_reason else "") + "\n", style="bold green")
        body.append_text(_message(x.reply))
    return Panel(body, title=escape(title), border_style="blue", expand=True)


def print_prompts(
    report: Report,
    console: Console,
    *,
    hypothesis: str | None = None,
    purpose: str | None = None,
    full: bool = False,
) -> None:
    """Every prompt and reply of the investigation, as sent (after redaction) and received."""
    rec = report.llm
    if rec is None:
        console.print("this report has no model exchanges (it was made by the playbook reasoner)")
        return
    for x in rec.exchanges:
        if hypothesis is not None and x.hypothesis_id != hypothesis:
            continue
        if purpose is not None and x.purpose != purpose:
            continue
        console.print(_exchange(x, new_only=not full))
    for note in rec.notes:
        console.print(f"note: {note}", style="yellow", markup=False)
    line = model_summary(report)
    if line:
        console.print(line, style="dim", markup=False)
