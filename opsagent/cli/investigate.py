"""``opsagent investigate`` and ``opsagent demo``: one incident, from its trigger to the report.

The exit code says how it ended: 0 a cause concluded (confirmed or probable), 3 inconclusive, 2 bad
input, 1 the Markdown could not be written (the report is printed all the same).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError

from opsagent.cli.common import ExitCode, err, fail, note, out, run, settings, warn, writable, write_text
from opsagent.cli.live import LiveTree
from opsagent.cli.options import (
    BEAM,
    MAX_STEPS,
    TIMEOUT_S,
    TOKEN_BUDGET,
    WALL_S,
    AlertmanagerOpt,
    BeamOpt,
    JsonOpt,
    K,
    KOpt,
    LessonsOpt,
    MarkdownOpt,
    MaxStepsOpt,
    PlaybooksOpt,
    StrategyOpt,
    TimeoutOpt,
    TokenBudgetOpt,
    WallOpt,
    budget,
)
from opsagent.errors import AlertError, ConfigError, Problem, UserError
from opsagent.feedback import keep_investigation
from opsagent.fixtures import load, not_utf8
from opsagent.models import Alert, Lesson, Report
from opsagent.packaged import demo_incident
from opsagent.pipeline import investigate
from opsagent.plan import InvestigationPlan, Planner, replay_reading
from opsagent.playbooks import Playbook
from opsagent.reasoner import PlaybookReasoner, Reasoner
from opsagent.report import model_summary, render, to_json, to_markdown
from opsagent.settings import Settings
from opsagent.store import Store, StoreError
from opsagent.triggers import ad_hoc_alert, duration, moment, symptom


def exit_code(report: Report) -> ExitCode:
    return ExitCode.INCONCLUSIVE if report.status == "inconclusive" else ExitCode.OK


def load_alert(path: Path) -> Alert:
    """An Alertmanager alert from a file: the alert object, a whole webhook payload (its first
    alert), or the ``alert:`` of a recorded incident's header."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise AlertError([Problem(str(path), not_utf8(exc))]) from exc
    except (OSError, yaml.YAMLError) as exc:
        raise AlertError([Problem(str(path), f"cannot read: {exc}")]) from exc
    if isinstance(raw, dict) and isinstance(raw.get("alerts"), list):  # a whole webhook payload
        if not raw["alerts"]:
            raise AlertError([Problem(str(path), "the payload holds no alerts", field="alerts")])
        raw = raw["alerts"][0]
    if isinstance(raw, dict) and "alert" in raw and "labels" not in raw:  # an incident.yaml
        raw = raw["alert"]
    try:
        return Alert.model_validate(raw)
    except ValidationError as exc:
        problems = [Problem(str(path), e["msg"], field=".".join(map(str, e["loc"])) or None) for e in exc.errors()]
        raise AlertError(problems) from exc


def recorded_incident(target: Path) -> Path | None:
    """The recorded incident a path names: its directory, or the directory of its ``incident.yaml``
    (which is not an alert file: investigated as one, it would read the live sources)."""
    if target.is_dir():
        return target
    if target.name == "incident.yaml" and target.parent.is_dir():
        return target.parent
    return None


def emit(report: Report, *, as_json: bool, markdown: Path | None) -> bool:
    """Print the report (and write it as Markdown); False when the Markdown could not be written
    after all (the report is printed whatever happens: its result is never lost)."""
    written = markdown is None or write_text(markdown, to_markdown(report), "--markdown")
    if as_json:
        sys.stdout.write(to_json(report) + "\n")
    else:
        render(report, out)
    return written


def investigate_cmd(
    target: Annotated[
        Path | None,
        typer.Argument(help="a recorded incident directory, or an alert file (YAML/JSON)", metavar="TARGET"),
    ] = None,
    alert_fingerprint: Annotated[
        str | None,
        typer.Option(
            "--alert", metavar="FINGERPRINT", help="investigate this alert firing in Alertmanager (opsagent alerts)"
        ),
    ] = None,
    from_alertmanager: Annotated[
        str | None,
        typer.Option(
            "--from-alertmanager",
            metavar="MATCHERS",
            help="the alert firing in Alertmanager that matches, e.g. 'alertname=X'",
        ),
    ] = None,
    alertmanager_url: AlertmanagerOpt = None,
    service: Annotated[
        str | None, typer.Option("--service", metavar="NAME", help="ask about a service directly: no alert needed")
    ] = None,
    symptom_name: Annotated[
        str | None,
        typer.Option("--symptom", metavar="WHAT", help="with --service: latency, errors, saturation or availability"),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="DURATION", help="with --service: the symptom began this long ago (30m, 2h)"),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at", metavar="TIME", help="with --service: the symptom began then (2026-03-17T14:02:00Z, 14:02 UTC)"
        ),
    ] = None,
    strategy_name: StrategyOpt = "hybrid",
    k: KOpt = K,
    beam: BeamOpt = BEAM,
    max_steps: MaxStepsOpt = MAX_STEPS,
    token_budget: TokenBudgetOpt = TOKEN_BUDGET,
    wall_s: WallOpt = WALL_S,
    timeout_s: TimeoutOpt = TIMEOUT_S,
    as_json: JsonOpt = False,
    markdown: MarkdownOpt = None,
    playbooks: PlaybooksOpt = None,
    live: Annotated[
        bool, typer.Option("--live/--no-live", metavar="", help="show the hypothesis tree as it grows (a terminal)")
    ] = True,
    use_lessons: LessonsOpt = True,
    reasoner_name: Annotated[
        str,
        typer.Option(
            "--reasoner", metavar="NAME", help="playbook (offline, the default) or llm (an OpenAI-compatible model)"
        ),
    ] = "playbook",
    model: Annotated[
        str | None, typer.Option("--model", metavar="NAME", help="model name for --reasoner llm (llm.model)")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            metavar="URL",
            help="OpenAI-compatible base URL (llm.base_url); fake://follow-hints: no server",
        ),
    ] = None,
    show_prompts: Annotated[
        bool, typer.Option("--show-prompts", metavar="", help="print every prompt sent to the model and its reply")
    ] = False,
) -> None:
    """Investigate one incident and print the root cause, its evidence and what was ruled out.

    The trigger is one of: a recorded incident or alert file; an alert firing in Alertmanager
    (--alert, --from-alertmanager); or a question (--service with --symptom, --since or --at).
    Exits 0 when a cause is concluded, 3 when inconclusive, 2 on bad input."""
    asked = ad_hoc(service, symptom_name, since, at)
    chosen = [x for x in (target, alert_fingerprint, from_alertmanager, service) if x is not None]
    if len(chosen) != 1:
        fail(
            "give one trigger: a recorded incident or alert file, --alert FINGERPRINT, "
            "--from-alertmanager MATCHERS, or --service S --symptom …"
        )
    asked_budget = budget(
        k=k, beam=beam, max_steps=max_steps, token_budget=token_budget, wall_s=wall_s, timeout_s=timeout_s
    )
    if target is not None and not target.exists():
        fail(f"{target}: no such file or directory")
    recording = recorded_incident(target) if target is not None else None
    if recording is not None and target is not None and recording != target:
        note(f"{target} is a recorded incident's header: replaying the recorded incident {recording}")
    if markdown is not None:
        writable(markdown, "--markdown")
    config = settings()
    memory, lessons = lessons_or_warn(config) if use_lessons else (None, [])

    async def go() -> Report:
        planner = Planner.from_settings(config, playbooks=playbooks, strategy=strategy_name, budget=asked_budget)
        reasoner = choose_reasoner(reasoner_name, config, list(planner.playbooks), model=model, base_url=base_url)
        view = (
            LiveTree(err, title=f"investigating · {strategy_name}")
            if live and not as_json and err.is_terminal
            else None
        )
        if view is not None:
            view.live.start()
        try:
            if recording is not None:
                plan = recorded_plan(planner, recording, reasoner=reasoner, lessons=lessons)
                return await investigate(plan, listener=view, now=datetime.now(UTC))
            # the live adapters (Elasticsearch, Kubernetes, Alertmanager…) only for a live investigation
            from adapters.config import sources_from_settings
            from opsagent.cli.alerts import alertmanager, trigger

            if target is not None:
                alert = load_alert(target)
            elif asked is not None:
                alert = asked
            else:
                client = alertmanager(config, alertmanager_url)
                alert = await trigger(client, fingerprint=alert_fingerprint, asked=from_alertmanager)
            async with sources_from_settings(config) as configured:  # none configured: all unreadable
                plan = planner.plan(configured.reading(alert), reasoner=reasoner, lessons=lessons)
                return await investigate(plan, listener=view)
        finally:
            if view is not None:
                view.live.stop()

    report = run(go)
    report = remember(memory, report) if memory is not None else unwritten(report)
    written = emit(report, as_json=as_json, markdown=markdown)
    if show_prompts:
        from opsagent.llm.cli import print_prompts  # the LLM client and httpx only where a model is asked

        print_prompts(report, err if as_json else out)
    line = model_summary(report)
    if line is not None and as_json:  # the terminal report shows it; beside JSON, stderr does
        note(line)
    raise typer.Exit(exit_code(report) if written else ExitCode.INTERNAL)


def recorded_plan(
    planner: Planner, recording: Path, *, reasoner: Reasoner | None = None, lessons: Sequence[Lesson] = ()
) -> InvestigationPlan:
    """The plan of ``opsagent investigate RECORDING``: the recording as every replay reads it, with
    the settings' choices (and the flags' where given, in ``planner``)."""
    return planner.plan(replay_reading(load(recording)[0]), reasoner=reasoner, lessons=lessons)


def demo_cmd(as_json: JsonOpt = False) -> None:
    """Replay the recorded incident opsagent ships with, offline: no server, no configuration, no lessons."""
    incident = demo_incident()
    if not as_json:
        note(f"replaying the recorded incident {incident.name} shipped with opsagent")
    report = run(lambda: investigate(recorded_plan(Planner.shipped(), incident), now=datetime.now(UTC)))
    emit(unwritten(report), as_json=as_json, markdown=None)
    raise typer.Exit(exit_code(report))


def ad_hoc(service: str | None, symptom_name: str | None, since: str | None, at: str | None) -> Alert | None:
    """The alert a question on the command line stands for; None when none was asked."""
    if service is None:
        if symptom_name or since or at:
            fail("--symptom, --since and --at go with --service")
        return None
    try:
        if symptom_name is None:
            raise AlertError([Problem("--symptom", "say what is wrong: latency, errors, saturation or availability")])
        now = datetime.now(UTC)
        return ad_hoc_alert(
            service,
            symptom(symptom_name),
            now=now,
            since=duration(since) if since else None,
            at=moment(at, now=now) if at else None,
        )
    except UserError as exc:
        fail(str(exc))


def choose_reasoner(
    name: str, config: Settings, books: list[Playbook], *, model: str | None, base_url: str | None
) -> Reasoner:
    """The reasoner --reasoner names; LLM options come from the config file and the environment, flags win."""
    if name == "playbook":
        if model or base_url:
            raise ConfigError("--model and --base-url need --reasoner llm")
        return PlaybookReasoner(books)
    if name == "llm":
        from opsagent.llm.cli import build_reasoner  # the LLM client and httpx only where a model is asked

        return build_reasoner(config, books, model=model, base_url=base_url)
    raise ConfigError(f"unknown reasoner {name!r}; choose playbook or llm")


def lessons_or_warn(config: Settings) -> tuple[Store | None, list[Lesson]]:
    """The investigation matters more than its lessons: a store that cannot be opened or read (a
    damaged header, or damaged pages behind an intact one) is said once, and the run goes on
    without lessons, recording none."""
    try:
        memory = Store(config.store)
    except StoreError as exc:
        warn(f"lessons off for this run: {exc}")
        return None, []
    try:
        return memory, memory.lessons()
    except StoreError as exc:
        memory.close()
        warn(f"lessons off for this run: {exc}")
        return None, []


def unwritten(report: Report) -> Report:
    """The report of a run that recorded no lesson: it does not list lessons as written."""
    return report.model_copy(update={"lessons": []})


def remember(memory: Store, report: Report) -> Report:
    """Keep the investigation (``opsagent investigations``, ``feedback``) and the lessons it teaches;
    the report comes back listing only the lessons that were recorded."""
    try:
        kept = keep_investigation(memory, report)
    except StoreError as exc:
        warn(f"not recorded: {exc}")
        return unwritten(report)
    if kept.not_learned:
        note(f"no lessons written: the conclusion fails rule checks ({'; '.join(kept.not_learned)})")
        return unwritten(report)
    if kept.lessons:
        note(
            f"{kept.lessons} lesson(s) recorded ({kept.merged} merged into existing ones); "
            f"review with `opsagent lessons list`"
        )
    return report


def register(app: typer.Typer) -> None:
    app.command(name="investigate")(investigate_cmd)
    app.command(name="demo")(demo_cmd)
