"""``opsagent lessons …`` (list, show, edit, rm, export, import) and ``opsagent feedback``: the
lessons the store holds, and the engineer's verdict on an investigation."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError
from rich.table import Table
from rich.text import Text

from opsagent.cli.common import ExitCode, deliver, err, fail, out, store, wide, writable
from opsagent.cli.options import PlaybooksOpt
from opsagent.environment import RELEASE
from opsagent.feedback import apply_feedback
from opsagent.fixtures import not_utf8
from opsagent.lessons import finalised, problems, root_cause_parts, unscoped
from opsagent.models import Lesson
from opsagent.plan import load_default_playbooks
from opsagent.reasoner import PlaybookReasoner
from opsagent.store import Store, StoreError

lessons_app = typer.Typer(help="Lessons: list, show, edit, rm, export, import.", no_args_is_help=True)


def _lesson_yaml(lesson: Lesson) -> str:
    return yaml.safe_dump(lesson.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def _what(le: Lesson) -> str:
    """What a lesson is about: the kind it refuted, or what it taught about its environment."""
    if le.teaches == "culprit":
        return f"cause behind {le.trigger.alert}: {le.component}"
    if le.teaches == "usual" and (le.feature or "").startswith(RELEASE):
        return f"release of {le.component} out while the cause was elsewhere: {(le.feature or '')[len(RELEASE) :]}"
    if le.teaches == "usual":
        return f"usual on {le.component}: {le.feature} up to {le.strength}"
    if le.teaches == "noise":
        return f"on innocent suspects under {le.trigger.alert}: {le.feature} up to {le.strength}"
    if le.teaches == "telling":
        return f"on the cause under {le.trigger.alert}: {le.feature} at {le.strength}"
    if le.teaches == "overturned":
        kind, _, check = (le.feature or "").partition("/")
        return f"{check} refuted {kind} on {le.component}, the cause, under {le.trigger.alert}"
    return le.refuted_kind


@lessons_app.command(name="list")
def lessons_list() -> None:
    """Every stored lesson, most recent first."""
    with store() as memory:
        lessons = memory.lessons()
    table = Table(title=f"{len(lessons)} lesson(s)")
    for col in ("id", "about", "trigger", "next action", "seen", "retrieved", "helped", "misled"):
        table.add_column(col, overflow="fold")
    for le in lessons:
        cells = (
            le.id,
            _what(le),
            ", ".join(le.trigger.signals) or le.trigger.condition,
            le.next_action.key(),
            str(le.count),
            str(le.times_retrieved),
            str(le.times_helped),
            str(le.times_misled),
        )
        table.add_row(*(Text(c) for c in cells))
    wide().print(table)


def _get(memory: Store, lesson_id: str) -> Lesson:
    try:
        return memory.lesson(lesson_id)
    except StoreError as exc:
        fail(str(exc))


@lessons_app.command(name="show")
def lessons_show(lesson_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """One lesson in full, as YAML."""
    with store() as memory:
        sys.stdout.write(_lesson_yaml(_get(memory, lesson_id)))


def _edit(text: str) -> str | None:
    """Open text in $VISUAL or $EDITOR; the edited text, or None when left unchanged."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as fh:
        fh.write(text)
        path = Path(fh.name)
    try:
        if subprocess.call([*shlex.split(editor), str(path)]) != 0:
            fail(f"the editor ({editor}) failed; nothing saved")
        edited = path.read_text(encoding="utf-8")
    finally:
        path.unlink(missing_ok=True)
    return None if edited == text else edited


@lessons_app.command(name="edit")
def lessons_edit(lesson_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Edit a lesson in $EDITOR (YAML); it is validated before it replaces the stored one."""
    with store() as memory:
        lesson = _get(memory, lesson_id)
        edited = _edit(_lesson_yaml(lesson))
        if edited is None:
            out.print("unchanged")
            return
        try:
            new = Lesson.model_validate(yaml.safe_load(edited)).model_copy(update={"id": lesson.id})
        except (yaml.YAMLError, ValidationError) as exc:
            fail(f"not saved, the edit does not validate: {exc}")
        issues = problems(new)
        if issues:
            fail(f"not saved: {'; '.join(issues)}")
        memory.replace_lesson(new)
    out.print(f"saved {lesson_id}")


@lessons_app.command(name="rm")
def lessons_rm(lesson_ids: Annotated[list[str], typer.Argument(metavar="ID...")]) -> None:
    """Delete lessons."""
    with store() as memory:
        for lesson_id in lesson_ids:
            _get(memory, lesson_id)
            memory.delete_lesson(lesson_id)
            out.print(f"deleted {lesson_id}")


@lessons_app.command(name="export")
def lessons_export(
    to: Annotated[
        Path | None, typer.Option("--out", metavar="FILE", help="file to write; standard output without it")
    ] = None,
) -> None:
    """Every lesson as one YAML document, for review in git."""
    if to is not None:
        writable(to, "--out")
    with store() as memory:
        text = yaml.safe_dump(
            [le.model_dump(mode="json") for le in memory.lessons()], sort_keys=False, allow_unicode=True
        )
    deliver(text, to, "--out")


@lessons_app.command(name="import")
def lessons_import(path: Annotated[Path, typer.Argument(metavar="FILE")]) -> None:
    """Import lessons from a YAML export; each bad entry is rejected with its reason, the rest
    imported (exit 2 when any was rejected)."""
    try:
        entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        fail(f"{path}: {not_utf8(exc)}")
    except (OSError, yaml.YAMLError) as exc:
        fail(f"{path}: cannot read: {exc}")
    if not isinstance(entries, list):
        fail(f"{path}: expected a list of lessons (as `opsagent lessons export` writes)")
    imported = rejected = 0
    with store() as memory:
        for index, entry in enumerate(entries, start=1):
            try:
                lesson = Lesson.model_validate(entry)
            except ValidationError as exc:
                where = ", ".join(".".join(map(str, e["loc"])) + ": " + e["msg"] for e in exc.errors())
                err.print(f"entry {index}: rejected ({where})", soft_wrap=True)
                rejected += 1
                continue
            issues = problems(lesson)
            if issues:
                err.print(f"entry {index}: rejected ({'; '.join(issues)})", soft_wrap=True)
                rejected += 1
                continue
            memory.upsert_lesson(finalised(lesson))
            imported += 1
            dormant = unscoped(lesson)
            if dormant is not None:
                err.print(f"entry {index}: imported; it lowers nothing: {dormant}", soft_wrap=True)
    out.print(f"imported {imported}, rejected {rejected}")
    if rejected:
        raise typer.Exit(ExitCode.BAD_INPUT)


def feedback_cmd(
    incident_id: Annotated[str, typer.Argument(metavar="INCIDENT_ID", help="as `opsagent investigations list` shows")],
    correct: Annotated[bool, typer.Option("--correct", metavar="", help="the conclusion was right")] = False,
    wrong: Annotated[bool, typer.Option("--wrong", metavar="", help="the conclusion was wrong")] = False,
    root_cause: Annotated[
        str | None,
        typer.Option(
            "--root-cause",
            metavar="SERVICE/KIND",
            help='what it really was, e.g. "stripe-api/downstream_latency"',
        ),
    ] = None,
    playbooks: PlaybooksOpt = None,
) -> None:
    """The engineer's verdict on an investigation: it counts for the lessons it used, and a wrong
    conclusion with a named root cause becomes a lesson."""
    if correct == wrong:
        fail("say --correct or --wrong")
    first_checks = PlaybookReasoner(load_default_playbooks(playbooks)).first_checks()
    if root_cause is not None:  # checked before anything is written: a typo must not replace a valid verdict
        try:
            service, kind = root_cause_parts(root_cause, kinds=first_checks)
        except ValueError as exc:
            fail(str(exc))
        root_cause = f"{service}/{kind}"
    with store() as memory:
        try:
            done = apply_feedback(
                memory,
                incident_id,
                correct=correct,
                root_cause=root_cause,
                first_checks=first_checks,
                now=datetime.now(UTC),
            )
        except (StoreError, ValueError) as exc:
            fail(str(exc))
    out.print(f"recorded: {incident_id} was {'right' if correct else 'wrong'}")
    if done.taught:
        out.print(f"taught the environment: {', '.join(done.taught)}", soft_wrap=True)
    if correct or root_cause is None:
        return
    if done.misled:
        out.print(f"lessons that lowered {root_cause}, counted as misleading: {', '.join(done.misled)}", soft_wrap=True)
    lesson = done.lesson
    if lesson is None:
        err.print(f"no lesson written: {done.no_lesson}", soft_wrap=True)
        return
    out.print(
        f"lesson {lesson.id}: {lesson.refuted_kind} under {', '.join(lesson.trigger.signals)} "
        f"-> first {lesson.next_action.key()}",
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(lessons_app, name="lessons")
    app.command(name="feedback")(feedback_cmd)
