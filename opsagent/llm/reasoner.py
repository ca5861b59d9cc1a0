"""The LLM reasoner: an OpenAI-compatible model proposes hypotheses, chooses calls, writes lessons.

It answers the same questions as the playbook reasoner (:class:`opsagent.reasoner.Reasoner`), and
the pipeline keeps it honest the same way: the loop's budgets decide when to stop (every model call
is charged to the investigation's token meter, and a call that could overrun the budget is not
made), the judge decides verdicts, and a citation only counts when a rule finds it in the data
(:mod:`opsagent.llm.grounding`).

Where the model fails, the playbook reasoner stands in and the report says so: invalid hypotheses
twice (after one repair with the validation error fed back), a server that stays unavailable after
its retries (the model is then not asked again in this investigation), a lesson that is not
concrete. One instance per investigation: :meth:`LLMReasoner.bind` makes it, with the meter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from opsagent.lessons import Retrieved, finalised, from_refutation, problems, releases_refuted, templated
from opsagent.llm.client import ChatClient, ChatRequest, ToolSchema, cost_usd, safe_url
from opsagent.llm.conversation import Renderer, Result, Thread, Turn, prompt_tokens
from opsagent.llm.errors import BudgetRefused, ModelError, ModelRejected, ModelUnavailable
from opsagent.llm.grounding import Rules, counted_summary
from opsagent.llm.parsing import Reply, arg_values, extract_json, parse_text, parse_tool_reply, validation_problems
from opsagent.llm.prompts import Prompts, default_prompts
from opsagent.llm.toolschema import CITE, FINAL, clean_schema, resolve, tool_schemas, usage_text
from opsagent.llm.views import (
    candidates_text,
    checks_text,
    hypothesis_text,
    incident_text,
    lessons_text,
    log_highlights,
    triage_text,
)
from opsagent.loop import Meter
from opsagent.models import (
    FAULT_KINDS,
    Action,
    Citation,
    Evidence,
    Hypothesis,
    HypothesisResult,
    Incident,
    Lesson,
    LessonTrigger,
    ModelExchange,
    ModelRecord,
    Observation,
    PromptMessage,
    Step,
)
from opsagent.playbooks import Playbook
from opsagent.reasoner import Decision, PlaybookReasoner
from opsagent.redaction import redact_messages
from opsagent.settings import LLMSettings
from opsagent.triage import Triage

log = structlog.get_logger("opsagent.llm")

#: A call is not made unless at least this many completion tokens fit in what is left of the budget.
MIN_COMPLETION_TOKENS = 128
#: Tokens kept free in the context window besides the completion (chat templates, the estimate's error).
CONTEXT_MARGIN = 256
#: A model's own prior is believed up to this much: proposals are ranked with the playbooks', not above them.
MAX_MODEL_PRIOR = 0.5

Purpose = Literal["propose", "repair", "act", "reflect"]


# ---------------------------------------------------------------- what the model must answer


class ProposedHypothesis(BaseModel):
    """A hypothesis as a model proposes it: the part of :class:`~opsagent.models.Hypothesis` it may set."""

    model_config = ConfigDict(extra="ignore")

    component: str = Field(description="a component named in the task")
    kind: str = Field(description="a fault kind named in the task")
    statement: str = Field(min_length=10, description="the suspected cause, in one sentence")
    confirm_if: list[str] = Field(min_length=1, description="what observations would confirm it")
    refute_if: list[str] = Field(min_length=1, description="what observations would refute it")
    prior: float = Field(ge=0, le=1, description="how likely, before verification")
    explains: list[str] = Field(default_factory=list, description="triage features of the component it accounts for")
    rationale: str = Field(default="", description="why, in a few words")

    @field_validator("component")
    @classmethod
    def _known_component(cls, component: str, info: ValidationInfo) -> str:
        known = (info.context or {}).get("components")
        if known is not None and component not in known:
            raise ValueError(f"unknown component {component!r}; name one of: {', '.join(sorted(known))}")
        return component

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind not in FAULT_KINDS or kind == "unknown":
            raise ValueError(
                f"unknown fault kind {kind!r}; one of: {', '.join(k for k in FAULT_KINDS if k != 'unknown')}"
            )
        return kind

    @field_validator("explains")
    @classmethod
    def _features_seen(cls, explains: list[str], info: ValidationInfo) -> list[str]:
        features = (info.context or {}).get("features")
        component = info.data.get("component")
        if features is None or component is None:
            return explains
        unknown = [f for f in explains if f not in features.get(component, ())]
        if unknown:
            raise ValueError(f"features not seen on {component}: {', '.join(unknown)}")
        return explains


class Proposals(BaseModel):
    model_config = ConfigDict(extra="ignore")

    hypotheses: list[ProposedHypothesis] = Field(description="most likely first")


class CitedReading(BaseModel):
    model_config = ConfigDict(extra="ignore")

    observation_id: str
    value: str = Field(description="what the observation showed")


class ProposedAction(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class LessonDraft(BaseModel):
    model_config = ConfigDict(extra="ignore")

    condition: str = Field(min_length=8, description="the observable situation that misled")
    signals: list[str] = Field(default_factory=list, description="triage features of that situation")
    refuting_evidence: list[CitedReading] = Field(min_length=1)
    next_action: ProposedAction = Field(description="the read-only call to make first next time")


class LessonReply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    lesson: LessonDraft | None


def _schema(model: type[BaseModel]) -> str:
    """The JSON Schema a model must answer in, without titles and class docstrings (tokens cost)."""
    schema = model.model_json_schema()
    schema.pop("description", None)
    return json.dumps(clean_schema(schema), separators=(",", ":"))


# ---------------------------------------------------------------- the reasoner


class LLMReasoner:
    name = "llm"

    def __init__(
        self,
        *,
        client: ChatClient,
        playbooks: Sequence[Playbook],
        settings: LLMSettings | None = None,
        prompts: Prompts | None = None,
        meter: Meter | None = None,
        observations: Mapping[str, Observation] | None = None,
    ) -> None:
        self.client = client
        self.books = list(playbooks)
        self.settings = settings or LLMSettings(model=client.model)
        self.prompts = prompts or default_prompts()
        self.meter = meter
        self.observations: Mapping[str, Observation] = observations if observations is not None else {}
        self.fallback = PlaybookReasoner(self.books)
        self.rules = Rules(self.books)
        self.mode: str = "tools" if self.settings.mode == "auto" else self.settings.mode
        self.record = ModelRecord(model=client.model, base_url=safe_url(client.base_url), mode=self.mode)
        self.threads: dict[str, Thread] = {}
        self.down: str | None = None
        self._stood_in: set[str] = set()
        self._in_flight = 0  # tokens reserved by calls not answered yet (hypotheses are verified concurrently)

    def bind(self, meter: Meter, observations: Mapping[str, Observation]) -> LLMReasoner:
        """A fresh reasoner for one investigation: its own transcript, charging this meter, reading
        what the investigation has observed."""
        return LLMReasoner(
            client=self.client,
            playbooks=self.books,
            settings=self.settings,
            prompts=self.prompts,
            meter=meter,
            observations=observations,
        )

    def transcript(self) -> ModelRecord:
        return self.record.model_copy(deep=True)

    # ------------------------------------------------------------ calling the model

    def _note(self, text: str, *, fallback: bool = False) -> None:
        self.record.notes.append(text)
        if fallback:
            self.record.fallbacks += 1
        log.info("llm.note", note=text, fallback=fallback)

    def _allowance(self, messages: Sequence[PromptMessage], tools: Sequence[ToolSchema]) -> tuple[int, float | None]:
        """Completion tokens and seconds this call may use; BudgetRefused when it cannot be afforded,
        counting what calls still in flight may spend."""
        estimate = prompt_tokens(messages, tools)
        completion = self.client.max_tokens
        seconds: float | None = None
        window_left = self.settings.context_window - CONTEXT_MARGIN - estimate
        if window_left < MIN_COMPLETION_TOKENS:
            raise ModelRejected(
                f"the prompt (~{estimate} tokens) does not fit the {self.settings.context_window}-token context window"
            )
        completion = min(completion, window_left)
        if self.meter is not None:
            budget = self.meter.budget
            available = budget.token_budget - self.meter.tokens - self._in_flight
            left = available - estimate
            if left < MIN_COMPLETION_TOKENS:
                raise BudgetRefused(
                    f"budget exhausted: {budget.token_budget} tokens (a model call needs "
                    f"~{estimate + MIN_COMPLETION_TOKENS}, {max(available, 0)} left)"
                )
            completion = min(completion, left)
            seconds = self.meter.remaining_s()
            if seconds <= 0:
                raise BudgetRefused(f"budget exhausted: {budget.wall_s:g} s wall clock")
        return completion, seconds

    async def _call(
        self,
        purpose: Purpose,
        hypothesis_id: str | None,
        messages: list[PromptMessage],
        *,
        tools: Sequence[ToolSchema] = (),
        json_mode: bool = False,
    ) -> PromptMessage:
        if self.down is not None:
            raise ModelUnavailable(self.down)
        completion, seconds = self._allowance(messages, tools)
        reserved = prompt_tokens(messages, tools) + completion
        index = len(self.record.exchanges) + 1
        self._in_flight += reserved
        try:
            result = await self.client.complete(
                ChatRequest(
                    messages=messages, tools=tools, json_mode=json_mode, max_tokens=completion, timeout_s=seconds
                )
            )
        except ModelError as exc:
            self.record.exchanges.append(
                ModelExchange(
                    index=index,
                    purpose=purpose,
                    hypothesis_id=hypothesis_id,
                    request=redact_messages(messages, self.client.redaction)[0],
                    tools=[t["function"]["name"] for t in tools],
                    error=str(exc),
                )
            )
            if isinstance(exc, ModelUnavailable):
                self.down = f"model unavailable: {exc}"
                self._note(f"{self.down}; the playbook reasoner stands in for the rest of this investigation")
            raise
        finally:
            self._in_flight -= reserved
        spent = result.prompt_tokens + result.completion_tokens
        if self.meter is not None:
            self.meter.tokens += spent
        usage = self.record.usage
        usage.calls += 1
        usage.prompt_tokens += result.prompt_tokens
        usage.completion_tokens += result.completion_tokens
        usage.estimated_calls += int(result.estimated)
        usage.cost_usd = cost_usd(
            self.settings.prices.get(self.client.model), usage.prompt_tokens, usage.completion_tokens
        )
        self.record.exchanges.append(
            ModelExchange(
                index=index,
                purpose=purpose,
                hypothesis_id=hypothesis_id,
                request=result.sent,
                tools=[t["function"]["name"] for t in tools],
                reply=result.reply,
                finish_reason=result.finish_reason,
                prompt_tokens=result.prompt_tokens,
                completion_tokens=result.completion_tokens,
                usage_estimated=result.estimated,
                attempts=result.attempts,
                latency_ms=result.latency_ms,
                redactions=result.redactions,
            )
        )
        log.debug("llm.call", purpose=purpose, hypothesis=hypothesis_id, tokens=spent, attempts=result.attempts)
        return result.reply

    def _system(self) -> PromptMessage:
        return PromptMessage(role="system", content=self.prompts.render("system"))

    # ------------------------------------------------------------ propose and rank

    def propose(
        self, incident: Incident, triage: Triage, *, k: int, lessons: Sequence[Retrieved], exclude: set[str]
    ) -> list[Hypothesis]:
        """Without an event loop the model cannot be asked: the playbooks' proposals (see :meth:`apropose`)."""
        return self.fallback.propose(incident, triage, k=k, lessons=lessons, exclude=exclude)

    async def apropose(
        self, incident: Incident, triage: Triage, *, k: int, lessons: Sequence[Retrieved], exclude: set[str]
    ) -> list[Hypothesis]:
        """The model's hypotheses merged with the playbooks' (the model's first, duplicates once); the
        playbooks' alone when the model's are invalid twice or it cannot be asked."""
        candidates = self.fallback.propose(incident, triage, k=k, lessons=lessons, exclude=exclude)
        if self.down is not None or self.record.budget_exhausted is not None:
            return candidates
        components = sorted(
            {c.component for c in triage.components}
            | set(incident.services)
            | {e.caller for e in triage.graph}
            | {e.callee for e in triage.graph}
        )
        context = {"components": set(components), "features": {c.component: set(c.features) for c in triage.components}}
        messages = [
            self._system(),
            PromptMessage(
                role="user",
                content=self.prompts.render(
                    "propose",
                    incident=incident_text(incident),
                    triage=triage_text(triage, incident),
                    logs=log_highlights(triage, incident, self.observations, cap=self.settings.observation_token_cap),
                    candidates=candidates_text(candidates),
                    lessons=lessons_text(lessons),
                    components=", ".join(components),
                    kinds=", ".join(k_ for k_ in FAULT_KINDS if k_ != "unknown"),
                    k=k,
                    schema=_schema(Proposals),
                ),
            ),
        ]
        problems_seen = ""
        purposes: tuple[Purpose, ...] = ("propose", "repair")
        for purpose in purposes:
            try:
                reply = await self._call(purpose, None, messages, json_mode=self.settings.json_mode)
            except BudgetRefused as exc:
                self.record.budget_exhausted = str(exc)
                self._note(
                    f"hypotheses: the model was not asked ({exc}); the playbooks' proposals were used", fallback=True
                )
                return candidates
            except ModelError as exc:
                self._note(f"hypotheses: the model failed ({exc}); the playbooks' proposals were used", fallback=True)
                return candidates
            proposals, problems_seen = self._read_proposals(reply.content or "", context)
            if proposals is not None:
                return self._merge(proposals[: max(k, 1)], candidates, incident, triage, exclude)
            messages = [
                *messages,
                reply,
                PromptMessage(role="user", content=self.prompts.render("repair", problems=problems_seen)),
            ]
        self._note(
            f"hypotheses: the model's answer was invalid twice ({problems_seen}); the playbooks' proposals were used",
            fallback=True,
        )
        return candidates

    @staticmethod
    def _read_proposals(text: str, context: dict[str, Any]) -> tuple[list[ProposedHypothesis] | None, str]:
        value, problem = extract_json(text)
        if problem is not None:
            return None, problem
        if isinstance(value, list):
            value = {"hypotheses": value}
        try:
            return Proposals.model_validate(value, context=context).hypotheses, ""
        except ValidationError as exc:
            return None, validation_problems(exc)

    def _merge(
        self,
        proposals: list[ProposedHypothesis],
        candidates: list[Hypothesis],
        incident: Incident,
        triage: Triage,
        exclude: set[str],
    ) -> list[Hypothesis]:
        excluded = {self._key_of(i) for i in exclude}
        by_key = {(h.component, h.kind): h for h in candidates}
        top = max((c.score for c in triage.components), default=0.0) or 1.0
        out: list[Hypothesis] = []
        for p in proposals:
            key = (p.component, p.kind)
            if key in excluded or any((h.component, h.kind) == key for h in out):
                continue
            twin = by_key.get(key)
            why = f"proposed by the model ({self.client.model})" + (f": {p.rationale}" if p.rationale else "")
            if twin is not None:
                out.append(twin.model_copy(update={"why": [*twin.why, why[:300]]}))
                continue
            book = next((b for b in sorted(self.books, key=lambda b: b.id) if b.kind == p.kind), None)
            profile = triage.profile(p.component)
            match = book.match(profile.features, incident.symptom) if book is not None and profile is not None else None
            weight = profile.score / top if profile is not None else 0.0
            prior = min(p.prior, MAX_MODEL_PRIOR)
            out.append(
                Hypothesis(
                    id=f"model:{p.kind}@{p.component}",
                    component=p.component,
                    kind=p.kind,
                    statement=p.statement,
                    confirm_if=p.confirm_if,
                    refute_if=p.refute_if,
                    prior=prior,
                    score=round(prior * (0.25 + (match or 0.0)) * (0.2 + weight), 5),
                    playbook=book.id if book is not None else None,
                    why=[why[:300]],
                    explains=[f"{p.component}/{f}" for f in p.explains],
                    consequences=list(book.consequences) if book is not None else [],
                )
            )
        out.extend(h for h in candidates if all(h.id != o.id for o in out))
        return out

    def _key_of(self, hypothesis_id: str) -> tuple[str, str]:
        head, _, component = hypothesis_id.rpartition("@")
        if head.startswith("model:"):
            return component, head.removeprefix("model:")
        book = self.fallback.playbooks.get(head)
        return component, book.kind if book is not None else head

    def rank(
        self, incident: Incident, candidates: list[Hypothesis], triage: Triage, lessons: Sequence[Retrieved]
    ) -> list[Hypothesis]:
        """Ranked together with the playbooks' rule: score, lessons, and what each explains that others do not."""
        return self.fallback.rank(incident, candidates, triage, lessons)

    # ------------------------------------------------------------ act

    async def decide(
        self,
        incident: Incident,
        hypothesis: Hypothesis,
        steps: Sequence[Step],
        observations: Mapping[str, Observation],
        *,
        final: bool,
    ) -> Decision:
        thread = self.threads.setdefault(hypothesis.id, Thread(hypothesis.id))
        if steps:
            thread.settle(steps[-1].index, steps[-1].observation_id)
        if self.down is not None:
            return await self._stand_in(incident, hypothesis, steps, observations, final=final, why=self.down)
        if self.record.budget_exhausted is not None:
            why = self.record.budget_exhausted
            return await self._stand_in(incident, hypothesis, steps, observations, final=final, why=why)
        counted = [e for s in steps for e in s.evidence]
        reply: Reply | None = None
        for _ in range(2):  # a reply that cannot be read gets one more chance, with what was wrong
            try:
                message = await self._act(incident, hypothesis, thread, steps, observations, counted, final=final)
            except BudgetRefused as exc:
                self.record.budget_exhausted = str(exc)
                self._note(f"the model is not asked again ({exc}); the playbook reasoner stands in while budget lasts")
                return await self._stand_in(incident, hypothesis, steps, observations, final=final, why=str(exc))
            except ModelError as exc:
                return await self._stand_in(incident, hypothesis, steps, observations, final=final, why=str(exc))
            reply = parse_tool_reply(message) if self.mode == "tools" else parse_text(message.content or "")
            grounded = self.rules.ground(reply.claims, hypothesis, incident, observations)
            action = reply.actions[0][1] if reply.actions and reply.final is None and not final else None
            thread.turns.append(self._turn(message, reply, grounded.notes, action, len(steps) + 1, final=final))
            if not reply.empty:
                thought = reply.thought or (f"Final: {reply.final}" if reply.final is not None else "")
                return Decision(thought=thought, action=action, evidence=grounded.evidence)
        problems_text = "; ".join(reply.problems) if reply is not None else "no reply"
        self._note(f"{hypothesis.id}: the model's reply could not be read twice ({problems_text}); verification ended")
        return Decision(thought=f"the model gave no usable reply ({problems_text})", action=None)

    async def _act(
        self,
        incident: Incident,
        h: Hypothesis,
        thread: Thread,
        steps: Sequence[Step],
        observations: Mapping[str, Observation],
        counted: list[Evidence],
        *,
        final: bool,
    ) -> PromptMessage:
        max_steps = self.meter.budget.max_steps if self.meter is not None else 6
        books = [b for b in self.books if b.kind == h.kind]
        template = "act_tools" if self.mode == "tools" else "act_text"
        task = self.prompts.render(
            template,
            hypothesis_id=h.id,
            incident=incident_text(incident),
            hypothesis=hypothesis_text(h),
            checks=checks_text(h, incident, books),
            usage=usage_text(),
            max_steps=max_steps,
        )
        head = [self._system(), PromptMessage(role="user", content=task)]
        status = self.prompts.render(
            "turn_status",
            hypothesis_id=h.id,
            counted=counted_summary(counted),
            steps_left=max(max_steps - len(steps), 0),
        )
        tail = [PromptMessage(role="user", content=self.prompts.render("budget_final"))] if final else []
        tools = tool_schemas(actions=not final) if self.mode == "tools" else []
        renderer = Renderer(self.prompts, self.mode, self.settings.observation_token_cap)
        limit = self.settings.context_window - CONTEXT_MARGIN - min(self.client.max_tokens, MIN_COMPLETION_TOKENS * 4)
        messages = renderer.render(head, thread, observations, status=status, tail=tail, tools=tools, limit=limit)
        try:
            return await self._call("act", h.id, messages, tools=tools)
        except ModelRejected as exc:
            if self.settings.mode != "auto" or self.mode != "tools" or "tool" not in str(exc).lower():
                raise
            self.mode = self.record.mode = "text"
            self._note(f"the server refused tool calling ({exc}); switched to the text format Thought/Action/Final")
            return await self._act(incident, h, thread, steps, observations, counted, final=final)

    def _turn(
        self, message: PromptMessage, reply: Reply, notes: list[str], action: Action | None, step: int, *, final: bool
    ) -> Turn:
        feedback = list(notes) + (
            [self.prompts.render("format_error", problems="; ".join(reply.problems))] if reply.problems else []
        )
        if self.mode != "tools" or not message.tool_calls:
            refused = ["not run: the budget is spent"] if final and reply.actions else []
            return Turn(message, [Result(None, feedback + refused, awaiting_step=step if action is not None else None)])
        results: list[Result] = []
        chosen = reply.actions[0][0] if action is not None else None
        for call in message.tool_calls:
            name = resolve(call.name)
            result = Result(call.id, [reply.call_notes[call.id]] if call.id in reply.call_notes else [])
            if name in (CITE, FINAL):
                result.notes.extend(feedback)
                feedback = []
            elif call.id == chosen:
                result.awaiting_step = step
            else:
                result.notes.append(
                    "not run: the budget is spent"
                    if final or reply.final is not None
                    else "not run: one tool call per turn; call it again if you still need it"
                )
            results.append(result)
        if feedback:
            results[-1].notes.extend(feedback)
        return Turn(message, results)

    async def _stand_in(
        self,
        incident: Incident,
        hypothesis: Hypothesis,
        steps: Sequence[Step],
        observations: Mapping[str, Observation],
        *,
        final: bool,
        why: str,
    ) -> Decision:
        """The playbook reasoner verifies in the model's place, and the report says so once per hypothesis."""
        if hypothesis.playbook is None or hypothesis.playbook not in self.fallback.playbooks:
            return Decision(thought=f"{why}; no playbook can stand in for {hypothesis.id}", action=None)
        if hypothesis.id not in self._stood_in:
            self._stood_in.add(hypothesis.id)
            self._note(f"{hypothesis.id}: verified by the playbook reasoner ({why})", fallback=True)
        return await self.fallback.decide(incident, hypothesis, steps, observations, final=final)

    # ------------------------------------------------------------ reflect

    def reflect(
        self, incident: Incident, result: HypothesisResult, now: datetime, observations: Mapping[str, Observation]
    ) -> Lesson | None:
        """Without an event loop the model cannot be asked: the rule's lesson (see :meth:`areflect`)."""
        return from_refutation(incident, result, now, observations)

    async def areflect(
        self, incident: Incident, result: HypothesisResult, now: datetime, observations: Mapping[str, Observation]
    ) -> Lesson | None:
        """The model's lesson for a refuted hypothesis when it is concrete; the rule's lesson otherwise."""
        rule = from_refutation(incident, result, now, observations)
        h = result.hypothesis
        if result.verdict.status != "refuted" or self.down is not None or self.record.budget_exhausted is not None:
            return rule
        refuting = "\n".join(
            f"- {e.observation_id} ({observations[e.observation_id].action.key()}): {e.statement}"
            for e in result.verdict.refuting
            if e.observation_id in observations
        )
        calls = ", ".join(s.action.key() for s in result.steps if s.action is not None) or "none"
        signals = (
            ", ".join(rule.trigger.signals if rule is not None else [f.split("/", 1)[-1] for f in h.explains]) or "none"
        )
        messages = [
            self._system(),
            PromptMessage(
                role="user",
                content=self.prompts.render(
                    "reflect",
                    hypothesis_id=h.id,
                    incident=incident_text(incident),
                    hypothesis=f"{h.kind} on {h.component}",
                    refuting=refuting or "(none)",
                    calls=calls,
                    signals=signals,
                    usage=usage_text(),
                    schema=_schema(LessonReply),
                ),
            ),
        ]
        try:
            reply = await self._call("reflect", h.id, messages, json_mode=self.settings.json_mode)
        except ModelError as exc:
            self._note(f"lesson for {h.id}: the model was not asked or failed ({exc}); the rule's lesson was kept")
            return rule
        lesson, why = self._read_lesson(reply.content or "", incident, result, now, observations, rule)
        if lesson is None:
            self._note(f"lesson for {h.id}: the model's lesson was rejected ({why}); the rule's lesson was kept")
            return rule
        return lesson

    def _read_lesson(
        self,
        text: str,
        incident: Incident,
        result: HypothesisResult,
        now: datetime,
        observations: Mapping[str, Observation],
        rule: Lesson | None,
    ) -> tuple[Lesson | None, str]:
        value, problem = extract_json(text)
        if problem is not None:
            return None, problem
        try:
            draft = LessonReply.model_validate(
                value if isinstance(value, dict) and "lesson" in value else {"lesson": value}
            ).lesson
        except ValidationError as exc:
            return None, validation_problems(exc)
        if draft is None:
            return None, "the model had nothing concrete to learn"
        h = result.hypothesis
        judged = {e.observation_id: e.statement for e in result.verdict.refuting}
        citations = []
        for c in draft.refuting_evidence:
            obs = observations.get(c.observation_id)
            if obs is None or not obs.ok:
                return None, f"cites {c.observation_id!r}, which is not an observation of this investigation"
            citations.append(
                Citation(observation_id=c.observation_id, value=judged.get(c.observation_id, c.value[:200]))
            )
        allowed = set(rule.trigger.signals) if rule is not None else set()
        allowed |= {f.split("/", 1)[1] for f in h.explains if f.startswith(h.component + "/")}
        signals = sorted(s for s in draft.signals if s in allowed) or sorted(allowed)
        action = Action(tool=resolve(draft.next_action.tool), args=arg_values(draft.next_action.args))
        try:
            lesson = Lesson(
                trigger=LessonTrigger(symptom=incident.symptom, condition=draft.condition[:300], signals=signals),
                refuting_evidence=citations,
                next_action=templated(action, h.component),
                refuted_kind=h.kind,
                services=[h.component],
                source_incident=incident.id,
                created_at=now,
                releases=releases_refuted(h.kind, h.component, observations.values()),
            )
        except ValidationError as exc:
            return None, validation_problems(exc)
        issues = problems(lesson)
        if issues:
            return None, "; ".join(issues)
        return finalised(lesson), ""
