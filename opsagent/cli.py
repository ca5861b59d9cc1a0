"""The ``opsagent`` command line (typer + rich).

User errors (bad fixture, alert, playbook, option) print a clear message and exit 2; they never
show a traceback.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from adapters.config import sources_from_settings
from opsagent.alerts_cli import AlertmanagerOpt, alertmanager, trigger
from opsagent.alerts_cli import register as register_alerts
from opsagent.errors import AlertError, ConfigError, Problem, UserError
from opsagent.fixtures import not_utf8, validate, write_json_schemas
from opsagent.lessons import finalised as lesson_finalised
from opsagent.lessons import from_feedback, misled_by, rule_check
from opsagent.lessons import problems as lesson_problems
from opsagent.llm.cli import build_reasoner, print_prompts
from opsagent.llm.cli import register as register_llm
from opsagent.logconfig import configure
from opsagent.loop import Budget
from opsagent.models import Alert, Lesson, Report
from opsagent.packaged import demo_incident
from opsagent.pipeline import investigate, investigate_fixture, load_default_playbooks
from opsagent.playbooks import Playbook
from opsagent.reasoner import PlaybookReasoner, Reasoner
from opsagent.report import model_summary, render, to_json, to_markdown
from opsagent.scoreboard import IncidentScore, Scoreboard, replay
from opsagent.service.cli import register as register_serve
from opsagent.settings import Settings, load_settings
from opsagent.sources_cli import register as register_source_commands
from opsagent.store import Store, StoreError
from opsagent.strategies import STRATEGIES, strategy
from opsagent.triggers import ad_hoc_alert, duration, moment, symptom

app = typer.Typer(
    help="Incident root-cause analysis for on-call engineers. Read-only.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
fixtures_app = typer.Typer(help="Recorded incidents: validate, schema.", no_args_is_help=True)
playbooks_app = typer.Typer(help="Playbooks: check.", no_args_is_help=True)
app.add_typer(fixtures_app, name="fixtures")
app.add_typer(playbooks_app, name="playbooks")
lessons_app = typer.Typer(help="Lessons: list, show, edit, rm, export, import.", no_args_is_help=True)
app.add_typer(lessons_app, name="lessons")
register_llm(app)  # opsagent prompts REPORT.json
register_serve(app)  # opsagent serve
register_alerts(app)  # opsagent alerts

console = Console()
err = Console(stderr=True)
T = TypeVar("T")


@app.callback()
def main(
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning, error")] = "warning",
) -> None:
    if log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        err.print(f"[bold red]error:[/] unknown log level {log_level!r}")
        raise typer.Exit(2)
    configure(level=log_level)


def _run(coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    try:
        return asyncio.run(coro_fn())
    except UserError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


StrategyOpt = Annotated[str, typer.Option("--strategy", "-s", help=f"one of: {', '.join(STRATEGIES)}")]
PlaybooksOpt = Annotated[
    Path | None,
    typer.Option("--playbooks", help="playbook directory (default: playbooks_dir, else the shipped playbooks)"),
]


def _budget(k: int, beam: int, max_steps: int, token_budget: int, wall_s: float, timeout_s: float) -> Budget:
    seconds = (wall_s, timeout_s)
    if min(k, beam, max_steps, token_budget) < 1 or not all(math.isfinite(x) and x > 0 for x in seconds):
        err.print(
            "[bold red]error:[/] --k, --beam, --max-steps, --token-budget, --wall-s and --timeout must be positive"
            " (--wall-s and --timeout finite numbers of seconds)",
            soft_wrap=True,
        )
        raise typer.Exit(2)
    return Budget(k=k, beam=beam, max_steps=max_steps, token_budget=token_budget, wall_s=wall_s, timeout_s=timeout_s)


class LiveView:
    """Hypotheses and their progress, redrawn as the loop reports."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, str]] = {}
        self.live = Live(self._table(), console=err, refresh_per_second=8, transient=False)

    def _table(self) -> Table:
        t = Table(title="verifying hypotheses", expand=True)
        for col in ("hypothesis", "steps", "status", "last action"):
            t.add_column(col, overflow="fold")
        for hid, row in self.rows.items():
            t.add_row(hid, row.get("steps", "0"), row.get("status", "…"), row.get("action", ""))
        return t

    def __call__(self, event: str, fields: dict[str, Any]) -> None:
        row = self.rows.setdefault(str(fields.get("id")), {})
        if event == "step":
            row["steps"] = str(fields.get("steps"))
            row["action"] = str(fields.get("action"))
        elif event == "verdict":
            row["status"] = str(fields.get("status"))
        self.live.update(self._table())


def _load_alert(path: Path) -> Alert:
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


def _writable(path: Path, option: str) -> None:
    """An output file can be written, checked before the investigation it is for runs (opened for
    appending, which changes nothing; removed again if it did not exist)."""
    problem = None
    if path.is_dir():
        problem = "is a directory"
    else:
        existed = path.exists()
        try:
            with path.open("a", encoding="utf-8"):
                pass
        except OSError as exc:
            problem = f"cannot be written: {exc.strerror or exc}"
        else:
            if not existed:
                path.unlink(missing_ok=True)
    if problem is not None:
        err.print(f"[bold red]error:[/] {option} {escape(str(path))} {escape(problem)}", soft_wrap=True)
        raise typer.Exit(2)


def _emit(report: Report, as_json: bool, markdown: Path | None) -> bool:
    """Print the report (and write it as Markdown); False when the Markdown could not be written
    after all (the report is printed whatever happens: its result is never lost)."""
    written = True
    if markdown is not None:
        try:
            markdown.write_text(to_markdown(report), encoding="utf-8")
        except OSError as exc:
            err.print(f"[bold red]error:[/] --markdown {escape(str(markdown))}: {escape(str(exc))}", soft_wrap=True)
            written = False
    if as_json:
        sys.stdout.write(to_json(report) + "\n")
    else:
        render(report, console)
    return written


@app.command(name="investigate")
def investigate_cmd(
    target: Annotated[
        Path | None, typer.Argument(help="a recorded incident directory, or an alert file (YAML/JSON)")
    ] = None,
    alert_fingerprint: Annotated[
        str | None, typer.Option("--alert", help="investigate this alert firing in Alertmanager (see opsagent alerts)")
    ] = None,
    from_alertmanager: Annotated[
        str | None,
        typer.Option("--from-alertmanager", help="the alert firing in Alertmanager that matches, e.g. 'alertname=X'"),
    ] = None,
    alertmanager_url: AlertmanagerOpt = None,
    service: Annotated[
        str | None, typer.Option("--service", help="ask about a service directly: no alert needed")
    ] = None,
    symptom_name: Annotated[
        str | None, typer.Option("--symptom", help="with --service: latency, errors, saturation or availability")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="with --service: the symptom began this long ago (30m, 2h)")
    ] = None,
    at: Annotated[
        str | None, typer.Option("--at", help="with --service: the symptom began then (2026-03-17T14:02:00Z, 14:02)")
    ] = None,
    strategy_name: StrategyOpt = "hybrid",
    k: Annotated[int, typer.Option("--k", help="hypotheses proposed per round")] = 5,
    beam: Annotated[int, typer.Option("--beam", help="hypotheses verified at once")] = 2,
    max_steps: Annotated[int, typer.Option("--max-steps", help="steps per hypothesis")] = 6,
    token_budget: Annotated[int, typer.Option("--token-budget", help="tokens per investigation")] = 40_000,
    wall_s: Annotated[float, typer.Option("--wall-s", help="wall-clock cap, seconds")] = 60.0,
    timeout_s: Annotated[float, typer.Option("--timeout", help="per tool call, seconds")] = 3.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="also write a Markdown report here")] = None,
    playbooks: PlaybooksOpt = None,
    live: Annotated[bool, typer.Option("--live/--no-live", help="show hypotheses as they are verified")] = True,
    use_lessons: Annotated[
        bool, typer.Option("--lessons/--no-lessons", help="retrieve lessons, record this investigation")
    ] = True,
    reasoner_name: Annotated[
        str, typer.Option("--reasoner", help="playbook (offline, the default) or llm (an OpenAI-compatible model)")
    ] = "playbook",
    model: Annotated[str | None, typer.Option("--model", help="model name for --reasoner llm (llm.model)")] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="OpenAI-compatible base URL (llm.base_url); fake://follow-hints: no server"),
    ] = None,
    show_prompts: Annotated[
        bool, typer.Option("--show-prompts", help="print every prompt sent to the model and its reply")
    ] = False,
) -> None:
    """Investigate one incident and print the root cause, its evidence and what was ruled out.

    The trigger is one of: a recorded incident or alert file; an alert firing in Alertmanager
    (--alert, --from-alertmanager); or a question (--service with --symptom, --since or --at)."""
    asked = _ad_hoc(service, symptom_name, since, at)
    chosen = [x for x in (target, alert_fingerprint, from_alertmanager, service) if x is not None]
    if len(chosen) != 1:
        err.print(
            "[bold red]error:[/] give one trigger: a recorded incident or alert file, --alert FINGERPRINT, "
            "--from-alertmanager MATCHERS, or --service S --symptom …",
            soft_wrap=True,
        )
        raise typer.Exit(2)
    budget = _budget(k, beam, max_steps, token_budget, wall_s, timeout_s)
    if markdown is not None:
        _writable(markdown, "--markdown")
    settings = _settings()
    store, lessons = _lessons_or_warn(settings) if use_lessons else (None, [])

    async def go() -> Report:
        strategy(strategy_name)  # fail fast on a bad name
        books = load_default_playbooks(playbooks or settings.playbooks_dir)
        reasoner = _reasoner(reasoner_name, settings, books, model=model, base_url=base_url)
        view = LiveView() if live and not as_json and err.is_terminal else None
        listener = view if view is not None else None
        if view is not None:
            view.live.start()
        try:
            if target is not None and target.is_dir():
                report, _ = await investigate_fixture(
                    target,
                    playbooks=books,
                    reasoner=reasoner,
                    strategy_name=strategy_name,
                    budget=budget,
                    listener=listener,
                    lessons=lessons,
                    now=datetime.now(UTC),
                )
                return report
            if target is not None:
                alert = _load_alert(target)
            elif asked is not None:
                alert = asked
            else:
                client = alertmanager(settings, alertmanager_url)
                alert = await trigger(client, fingerprint=alert_fingerprint, asked=from_alertmanager)
            async with sources_from_settings(settings) as configured:  # none configured: all unreadable
                return await investigate(
                    alert,
                    sources=configured.sources,
                    catalog=configured.catalog,
                    reasoner=reasoner,
                    strategy_name=strategy_name,
                    budget=budget,
                    listener=listener,
                    lessons=lessons,
                    lessons_top_k=settings.lessons_top_k,
                    lessons_cap=settings.lessons_recent,
                )
        finally:
            if view is not None:
                view.live.stop()

    if target is not None and not target.exists():
        err.print(f"[bold red]error:[/] {target}: no such file or directory")
        raise typer.Exit(2)
    report = _run(go)
    if store is not None:
        _remember(store, report)
    written = _emit(report, as_json, markdown)
    if show_prompts:
        print_prompts(report, err if as_json else console)
    line = model_summary(report)
    if line is not None and as_json:  # the terminal report shows it; beside JSON, stderr does
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    if not written:
        raise typer.Exit(1)


@app.command(name="demo")
def demo_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Replay the recorded incident opsagent ships with, offline: no server, no configuration, no lessons."""
    incident = demo_incident()
    if not as_json:
        err.print(f"replaying the recorded incident {incident.name} shipped with opsagent", highlight=False)
    report, _ = _run(lambda: investigate_fixture(incident, playbooks=load_default_playbooks(), now=datetime.now(UTC)))
    _emit(report, as_json, None)


def _ad_hoc(service: str | None, symptom_name: str | None, since: str | None, at: str | None) -> Alert | None:
    """The alert a question on the command line stands for; None when none was asked."""
    if service is None:
        if symptom_name or since or at:
            err.print("[bold red]error:[/] --symptom, --since and --at go with --service")
            raise typer.Exit(2)
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
        err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None


def _reasoner(
    name: str, settings: Settings, books: list[Playbook], *, model: str | None, base_url: str | None
) -> Reasoner:
    """The reasoner --reasoner names; LLM options come from the config file and the environment, flags win."""
    if name == "playbook":
        if model or base_url:
            raise ConfigError("--model and --base-url need --reasoner llm")
        return PlaybookReasoner(books)
    if name == "llm":
        return build_reasoner(settings, books, model=model, base_url=base_url)
    raise ConfigError(f"unknown reasoner {name!r}; choose playbook or llm")


def _wide() -> Console:
    """Tables piped to a file or another program are not folded to 80 columns."""
    return console if console.is_terminal else Console(width=200)


def _settings() -> Settings:
    try:
        return load_settings()
    except UserError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None


def _lessons_or_warn(settings: Settings) -> tuple[Store | None, list[Lesson]]:
    """The investigation matters more than its lessons: a store that cannot be opened or read (a
    damaged header, or damaged pages behind an intact one) is said once, and the run goes on
    without lessons, recording none."""
    try:
        store = Store(settings.store)
    except StoreError as exc:
        err.print(f"[yellow]warning:[/] lessons off for this run: {escape(str(exc))}", soft_wrap=True)
        return None, []
    try:
        return store, store.lessons()
    except StoreError as exc:
        store.close()
        err.print(f"[yellow]warning:[/] lessons off for this run: {escape(str(exc))}", soft_wrap=True)
        return None, []


def _remember(store: Store, report: Report) -> None:
    try:
        store.save_investigation(report)
        store.count_use([u.lesson_id for u in report.lessons_used])
        issues = rule_check(report)
        if issues:
            err.print(f"no lessons written: the conclusion fails rule checks ({'; '.join(issues)})", soft_wrap=True)
            return
        merged = sum(store.upsert_lesson(le)[1] for le in report.lessons)
        if report.lessons:
            err.print(
                f"{len(report.lessons)} lesson(s) recorded ({merged} merged into existing ones); "
                f"review with `opsagent lessons list`",
                soft_wrap=True,
            )
    except StoreError as exc:
        err.print(f"[yellow]warning:[/] not recorded: {escape(str(exc))}", soft_wrap=True)


@contextmanager
def _store(settings: Settings | None = None) -> Iterator[Store]:
    """The store, for a command about what it holds (lessons, feedback): one that cannot be opened
    or read, then or in the middle of the command, is a clear error and exit 2, never a traceback."""
    settings = settings or _settings()
    try:
        with Store(settings.store) as store:
            yield store
    except StoreError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None


def _scoreboard_table(board: Scoreboard) -> Table:
    t = Table(title=f"replay · strategy {board.strategy}")
    for col in (
        "incident",
        "truth",
        "top 3 (component/kind)",
        "status",
        "hit@1",
        "hit@3",
        "steps",
        "calls",
        "tokens",
        "wall ms",
    ):
        t.add_column(col, overflow="fold")
    for s in board.scores:
        t.add_row(
            s.slug,
            f"{s.truth_service}/{s.truth_kind}",
            "\n".join(f"{c}/{k}" for c, k in s.top),
            s.status + ("" if s.verdict_ok else " ✗"),
            "✓" if s.hit1 else "·",
            "✓" if s.hit3 else "·",
            str(s.steps),
            str(s.tool_calls),
            str(s.tokens),
            f"{s.wall_ms:.0f}",
        )
    return t


def summary_line(board: Scoreboard) -> str:
    return (
        f"AC@1 {board.ac(1):.3f}  AC@3 {board.ac(3):.3f}  Avg@5 {board.avg5:.3f}  "
        f"kind accuracy {board.kind_accuracy:.3f}  verdicts right {board.verdict_accuracy:.3f}  "
        f"({len(board.scores)} incidents)"
    )


@app.command(name="replay")
def replay_cmd(
    directory: Annotated[Path, typer.Argument(help="a directory of recorded incidents (or one incident)")] = Path(
        "fixtures/incidents"
    ),
    strategy_name: StrategyOpt = "hybrid",
    as_json: Annotated[bool, typer.Option("--json", help="print the scoreboard as JSON")] = False,
    playbooks: PlaybooksOpt = None,
    lessons_mode: Annotated[
        str, typer.Option("--lessons", help="on: investigations retrieve stored lessons; off: they do not")
    ] = "off",
    learn: Annotated[
        bool, typer.Option("--learn", help="store the lessons each incident teaches (vs its truth)")
    ] = False,
) -> None:
    """Replay recorded incidents and print a scoreboard (AC@1, AC@3, Avg@5, kind accuracy)."""
    if lessons_mode not in ("on", "off"):
        err.print(f"[bold red]error:[/] --lessons takes on or off, not {lessons_mode!r}")
        raise typer.Exit(2)
    store, _ = _lessons_or_warn(_settings()) if learn or lessons_mode == "on" else (None, [])

    async def go() -> Scoreboard:
        strategy(strategy_name)
        books = load_default_playbooks(playbooks or _settings().playbooks_dir)
        return await replay(
            directory,
            strategy_name=strategy_name,
            playbooks=books,
            memory=store,
            use_lessons=lessons_mode == "on",
            learn=learn,
        )

    board = _run(go)
    if learn and store is not None:
        try:
            err.print(f"{len(store.lessons())} lesson(s) in {store.where}", soft_wrap=True)
        except StoreError as exc:
            err.print(f"[yellow]warning:[/] {escape(str(exc))}", soft_wrap=True)
    if as_json:
        payload: dict[str, Any] = {
            "strategy": board.strategy,
            "ac1": board.ac(1),
            "ac3": board.ac(3),
            "avg5": board.avg5,
            "kind_accuracy": board.kind_accuracy,
            "verdict_accuracy": board.verdict_accuracy,
            "incidents": [IncidentScore.model_dump(s) for s in board.scores],
        }
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    wide = _wide()
    wide.print(_scoreboard_table(board))
    wide.print(summary_line(board))


@fixtures_app.command(name="validate")
def fixtures_validate(
    paths: Annotated[list[Path], typer.Argument(help="recorded incident directories (or a parent directory)")],
) -> None:
    """Check recorded incidents against the format; name the file, line and field of each error."""
    problems: list[Problem] = []
    checked = 0
    for path in paths:
        targets = (
            [path]
            if (path / "incident.yaml").exists() or not path.is_dir()
            else [p for p in sorted(path.iterdir()) if p.is_dir()]
        )
        for target in targets or [path]:
            checked += 1
            problems.extend(validate(target))
    for p in problems:
        err.print(str(p), highlight=False, markup=False, soft_wrap=True)
    if problems:
        err.print(f"{len(problems)} problem(s) in {checked} incident(s)")
        raise typer.Exit(1)
    console.print(f"{checked} incident(s) valid")


@fixtures_app.command(name="schema")
def fixtures_schema(
    out: Annotated[Path, typer.Option("--out", help="directory for the JSON Schema files")] = Path("fixtures/schema"),
) -> None:
    """Write the JSON Schema of every file of the recorded-incident format."""
    try:
        written = write_json_schemas(out)
    except OSError as exc:
        err.print(f"[bold red]error:[/] --out {escape(str(out))}: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    for path in written:
        console.print(str(path))


@playbooks_app.command(name="check")
def playbooks_check(directory: PlaybooksOpt = None) -> None:
    """Validate playbooks; name the file and field of each error."""
    try:
        books = load_default_playbooks(directory or _settings().playbooks_dir)
    except UserError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    where = Path(books[0].source_file or ".").parent if books else directory
    names = ", ".join(sorted(b.id for b in books))
    console.print(f"{len(books)} playbook(s) valid in {where}: {names}", soft_wrap=True)


# ---------------------------------------------------------------- lessons and feedback


def _lesson_yaml(lesson: Lesson) -> str:
    return yaml.safe_dump(lesson.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


@lessons_app.command(name="list")
def lessons_list() -> None:
    """Every stored lesson, most recent first."""
    with _store() as store:
        lessons = store.lessons()
    table = Table(title=f"{len(lessons)} lesson(s)")
    for col in ("id", "refuted kind", "trigger", "next action", "seen", "retrieved", "helped", "misled"):
        table.add_column(col, overflow="fold")
    for le in lessons:
        table.add_row(
            le.id,
            le.refuted_kind,
            ", ".join(le.trigger.signals) or le.trigger.condition,
            le.next_action.key(),
            str(le.count),
            str(le.times_retrieved),
            str(le.times_helped),
            str(le.times_misled),
        )
    _wide().print(table)


@lessons_app.command(name="show")
def lessons_show(lesson_id: str) -> None:
    """One lesson in full, as YAML."""
    with _store() as store:
        sys.stdout.write(_lesson_yaml(_get(store, lesson_id)))


def _get(store: Store, lesson_id: str) -> Lesson:
    try:
        return store.lesson(lesson_id)
    except StoreError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None


def _edit(text: str) -> str | None:
    """Open text in $VISUAL or $EDITOR; the edited text, or None when left unchanged."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as fh:
        fh.write(text)
        path = Path(fh.name)
    try:
        if subprocess.call([*shlex.split(editor), str(path)]) != 0:
            err.print(f"[bold red]error:[/] the editor ({editor}) failed; nothing saved")
            raise typer.Exit(2)
        edited = path.read_text(encoding="utf-8")
    finally:
        path.unlink(missing_ok=True)
    return None if edited == text else edited


@lessons_app.command(name="edit")
def lessons_edit(lesson_id: str) -> None:
    """Edit a lesson in $EDITOR (YAML); it is validated before it replaces the stored one."""
    with _store() as store:
        lesson = _get(store, lesson_id)
        edited = _edit(_lesson_yaml(lesson))
        if edited is None:
            console.print("unchanged")
            return
        try:
            new = Lesson.model_validate(yaml.safe_load(edited)).model_copy(update={"id": lesson.id})
        except (yaml.YAMLError, ValidationError) as exc:
            err.print(f"[bold red]error:[/] not saved, the edit does not validate: {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(2) from None
        issues = lesson_problems(new)
        if issues:
            err.print(f"[bold red]error:[/] not saved: {'; '.join(issues)}", soft_wrap=True)
            raise typer.Exit(2)
        store.replace_lesson(new)
    console.print(f"saved {lesson_id}")


@lessons_app.command(name="rm")
def lessons_rm(lesson_ids: list[str]) -> None:
    """Delete lessons."""
    with _store() as store:
        for lesson_id in lesson_ids:
            _get(store, lesson_id)
            store.delete_lesson(lesson_id)
            console.print(f"deleted {lesson_id}")


@lessons_app.command(name="export")
def lessons_export(
    out: Annotated[Path | None, typer.Option("--out", help="file to write; standard output without it")] = None,
) -> None:
    """Every lesson as one YAML document, for review in git."""
    if out is not None:
        _writable(out, "--out")
    with _store() as store:
        text = yaml.safe_dump(
            [le.model_dump(mode="json") for le in store.lessons()], sort_keys=False, allow_unicode=True
        )
    if out is None:
        sys.stdout.write(text)
    else:
        try:
            out.write_text(text, encoding="utf-8")
        except OSError as exc:
            err.print(f"[bold red]error:[/] --out {escape(str(out))}: {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(1) from None
        console.print(f"wrote {out}")


@lessons_app.command(name="import")
def lessons_import(path: Path) -> None:
    """Import lessons from a YAML export; each bad entry is rejected with its reason, the rest imported."""
    try:
        entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        err.print(f"[bold red]error:[/] {path}: {not_utf8(exc)}", soft_wrap=True)
        raise typer.Exit(2) from None
    except (OSError, yaml.YAMLError) as exc:
        err.print(f"[bold red]error:[/] {path}: cannot read: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    if not isinstance(entries, list):
        err.print(f"[bold red]error:[/] {path}: expected a list of lessons (as `opsagent lessons export` writes)")
        raise typer.Exit(2)
    imported = rejected = 0
    with _store() as store:
        for index, entry in enumerate(entries, start=1):
            try:
                lesson = Lesson.model_validate(entry)
            except ValidationError as exc:
                where = ", ".join(".".join(map(str, e["loc"])) + ": " + e["msg"] for e in exc.errors())
                err.print(f"entry {index}: rejected ({where})", soft_wrap=True, markup=False)
                rejected += 1
                continue
            issues = lesson_problems(lesson)
            if issues:
                err.print(f"entry {index}: rejected ({'; '.join(issues)})", soft_wrap=True, markup=False)
                rejected += 1
                continue
            store.upsert_lesson(lesson_finalised(lesson))
            imported += 1
    console.print(f"imported {imported}, rejected {rejected}")
    if rejected:
        raise typer.Exit(1)


@app.command(name="feedback")
def feedback_cmd(
    incident_id: str,
    correct: Annotated[bool, typer.Option("--correct", help="the conclusion was right")] = False,
    wrong: Annotated[bool, typer.Option("--wrong", help="the conclusion was wrong")] = False,
    root_cause: Annotated[
        str | None,
        typer.Option("--root-cause", help='what it really was: "service/kind", e.g. "stripe-api/downstream_latency"'),
    ] = None,
    playbooks: PlaybooksOpt = None,
) -> None:
    """The engineer's verdict on an investigation: it counts for the lessons it used, and a wrong
    conclusion with a named root cause becomes a lesson."""
    if correct == wrong:
        err.print("[bold red]error:[/] say --correct or --wrong")
        raise typer.Exit(2)
    with _store() as store:
        try:
            record = store.investigation(incident_id)
            report = store.report(incident_id)
            store.record_feedback(incident_id, correct=correct, root_cause=root_cause)
        except StoreError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(2) from None
        if correct:  # a lesson that lowered the conclusion the engineer confirms misled, however it ended
            rc = report.root_cause
            misled = misled_by(report.lessons_used, rc.component, rc.kind) if rc is not None else []
            store.count_use([i for i in record.lessons_used if i not in misled], counter="helped")
            store.count_use(misled, counter="misled")
            console.print(f"recorded: {incident_id} was right")
            return
        console.print(f"recorded: {incident_id} was wrong")
        if root_cause is None:
            return
        service, _, kind = root_cause.partition("/")
        misled = misled_by(report.lessons_used, service, kind)
        if misled:
            store.count_use(misled, counter="misled")
            console.print(
                f"lessons that lowered {root_cause}, counted as misleading: {', '.join(misled)}", soft_wrap=True
            )
        first_checks = PlaybookReasoner(load_default_playbooks(playbooks)).first_checks()
        try:
            lesson = from_feedback(report, root_cause, datetime.now(UTC), first_checks=first_checks)
        except ValueError as exc:
            err.print(f"no lesson written: {escape(str(exc))}", soft_wrap=True)
            return
        if lesson is None:
            err.print("no lesson written: the report has no conclusion to correct", soft_wrap=True)
            return
        store.upsert_lesson(lesson)
        console.print(
            f"lesson {lesson.id}: {lesson.refuted_kind} under {', '.join(lesson.trigger.signals)} "
            f"-> first {lesson.next_action.key()}"
        )


register_source_commands(app)

if __name__ == "__main__":
    app()
