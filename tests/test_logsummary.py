"""The log summariser: parsing oddities, masking, template mining, change detection, budgeted text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from opsagent.logsummary import (
    LineParser,
    LogSummariser,
    Masker,
    TemplateMiner,
    families_of,
    mask,
    normalise_level,
    render,
)
from opsagent.models import LogsData, TimeRange
from opsagent.tokens import estimate_tokens

T0 = datetime(2026, 3, 17, 13, 0, tzinfo=UTC)
BASELINE = TimeRange(start=T0, end=T0 + timedelta(minutes=50))
WINDOW = TimeRange(start=T0 + timedelta(minutes=60), end=T0 + timedelta(minutes=90))


@dataclass(frozen=True)
class Line:
    ts: datetime
    service: str
    level: str
    message: str


def at(minute: float) -> datetime:
    return T0 + timedelta(minutes=minute)


def summarise(lines: list[Line], **options: int) -> LogsData:
    return LogSummariser(**options).summarise(lines, baseline=BASELINE, window=WINDOW, service=None)


# ---------------------------------------------------------------- levels


@pytest.mark.parametrize(
    ("spelling", "level"),
    [
        ("INFO", "info"),
        ("I", "info"),
        ("info", "info"),
        ("INF", "info"),
        ("notice", "info"),
        ("WARN", "warn"),
        ("WARNING", "warn"),
        ("W", "warn"),
        ("ERR", "error"),
        ("ERROR", "error"),
        ("E", "error"),
        ("[error]", "error"),
        ("FATAL", "fatal"),
        ("CRIT", "fatal"),
        ("critical", "fatal"),
        ("PANIC", "fatal"),
        ("DEBUG", "debug"),
        ("trace", "debug"),
        ("LOG", "info"),  # PostgreSQL
        ("verbose", "debug"),
        ("0", "fatal"),  # syslog emergency
        ("3", "error"),  # syslog err
        ("4", "warn"),
        ("6", "info"),
        ("7", "debug"),
        ("50", "error"),  # pino
        ("30", "info"),
        ("whatever", "unknown"),
        ("", "unknown"),
    ],
)
def test_level_spellings_normalise_to_five_levels(spelling: str, level: str) -> None:
    assert normalise_level(spelling) == level


# ---------------------------------------------------------------- raw lines


def parse(lines: list[str | bytes]) -> tuple[list[object], LineParser]:
    parser = LineParser(service="api", default_ts=T0)
    return list(parser.parse(lines)), parser


def test_a_json_line_gives_its_fields() -> None:
    line = json.dumps(
        {"@timestamp": "2026-03-17T14:05:21Z", "log": {"level": "ERROR"}, "message": "boom", "service": {"name": "pay"}}
    )
    (rec,), parser = parse([line])
    assert (rec.ts, rec.level, rec.message, rec.service) == (
        datetime(2026, 3, 17, 14, 5, 21, tzinfo=UTC),
        "ERROR",
        "boom",
        "pay",
    )  # type: ignore[attr-defined]
    assert parser.counts["json"] == 1


def test_a_logfmt_line_gives_its_fields() -> None:
    (rec,), parser = parse(['ts=2026-03-17T14:05:21Z level=warn msg="slow call" dur=2s'])
    assert (rec.level, rec.message) == ("warn", "slow call")  # type: ignore[attr-defined]
    assert parser.counts["logfmt"] == 1


def test_a_plain_line_gives_timestamp_level_and_message() -> None:
    (rec,), parser = parse(["2026-03-17 14:05:21,123 ERROR [main] connection refused"])
    assert rec.ts == datetime(2026, 3, 17, 14, 5, 21, 123000, tzinfo=UTC)  # type: ignore[attr-defined]
    assert (rec.level, rec.message) == ("ERROR", "[main] connection refused")  # type: ignore[attr-defined]
    assert parser.counts["plain"] == 1 and parser.counts["naive_timestamp"] == 1


def test_a_line_without_timestamp_takes_the_previous_one_and_is_counted() -> None:
    records, parser = parse(["2026-03-17T14:05:21Z INFO started", "worker ready"])
    assert [r.ts for r in records] == [datetime(2026, 3, 17, 14, 5, 21, tzinfo=UTC)] * 2  # type: ignore[attr-defined]
    assert parser.counts["no_timestamp"] == 1 and parser.counts["no_level"] == 1


def test_bytes_that_are_not_utf8_are_replaced_and_counted() -> None:
    (rec,), parser = parse([b"2026-03-17T14:05:21Z ERROR bad \xff\xfe byte"])
    assert "\ufffd" in rec.message  # type: ignore[attr-defined]
    assert parser.counts["non_utf8"] == 1


def test_a_line_over_64_kib_is_cut_and_counted() -> None:
    (rec,), parser = parse(["2026-03-17T14:05:21Z ERROR " + "x" * 100_000])
    assert len(rec.message) < 64 * 1024  # type: ignore[attr-defined]
    assert parser.counts["oversized"] == 1


def test_broken_json_is_read_as_plain_text_and_counted() -> None:
    (rec,), parser = parse(['{"level": "error", "message": "cut in the mid'])
    assert rec.message.startswith("{")  # type: ignore[attr-defined]
    assert parser.counts["bad_json"] == 1


def test_stack_frames_continue_the_previous_record() -> None:
    records, parser = parse(
        [
            "2026-03-17T14:05:21Z ERROR java.lang.IllegalStateException: boom",
            "\tat com.shop.Order.place(Order.java:42)",
            "",
        ]
    )
    assert len(records) == 1 and records[0].message.endswith("(Order.java:42)")  # type: ignore[attr-defined]
    assert parser.counts["continuation"] == 1 and parser.counts["empty"] == 1
    assert "exception" in families_of(records[0].message)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "line",
    [
        "=" * 70_000,
        "x=" * 35_000,
        "{" * 5_000,
        b"\xff\xfe" * 1_000,
        "\x00\x01\x02",
        "2026-13-45T99:99:99Z ERROR impossible date",
        '{"ts": 1e400, "level": null, "message": ["a", 1]}',
        "Feb 30 10:00:00 host app: no such day",
        "a@" * 20_000,
    ],
)
def test_pathological_lines_are_summarised_without_raising(line: str | bytes) -> None:
    data = LogSummariser().summarise_lines([line, line], baseline=BASELINE, window=WINDOW, service="api")
    assert data.total + data.outside_range == 2


def test_summarising_raw_lines_reports_every_oddity() -> None:
    lines: list[str | bytes] = [
        "2026-03-17T14:05:00Z ERROR payment declined",
        b"2026-03-17T14:06:00Z ERROR \xff",
        "no timestamp here",
        "2026-03-17T13:10:00Z LOUD odd level",
    ]
    data = LogSummariser().summarise_lines(lines, baseline=BASELINE, window=WINDOW, service="api")
    assert data.total == 4
    assert {"non_utf8", "no_timestamp", "replacement_characters", "unknown_level"} <= set(data.oddities)


# ---------------------------------------------------------------- masking


@pytest.mark.parametrize(
    ("message", "masked"),
    [
        ("retry 3 of 5", "retry <NUM> of <NUM>"),
        ("took 2.5s", "took <NUM>"),
        ("took 12 ms", "took <DURATION>"),
        ("GET /v1/stock/SKU-63363 -> 200 (6 ms)", "GET <PATH> -> <NUM> (<DURATION>)"),
        ("lock 0x7f3a2c held", "lock <HEX> held"),
        ("span a8e147e1f59e8c2a33d9b0df73d70f31", "span <HEX>"),
        ("order 6c3a9a36-3108-43c3-cd50-c3f26b5362a5 failed", "order <UUID> failed"),
        ("from 10.40.1.106", "from <IP>"),
        ("peer 10.40.1.106:44604 closed", "peer <ADDR> closed"),
        ("dial db.prod.internal:5432 refused", "dial <ADDR> refused"),
        ("see https://status.example.com/x?y=1 now", "see <URL> now"),
        ("mail ops@example.com", "mail <EMAIL>"),
        ("open /var/lib/data/x.db", "open <PATH>"),
        ("sent 1190 bytes (1.16 KB), got 5 B", "sent <SIZE>, got <SIZE>"),
        ("at 2026-03-17T14:05:21.123Z ok", "at <DATE> ok"),
        ("at Sun Jul 3 10:05:25 2005 ok", "at <DATE> ok"),
        ("lifetime 00:02", "lifetime <TIME>"),
        ("ready=true,mode=false", "ready=<BOOL>,mode=<BOOL>"),
        ("session opened for user cyrus", "session opened for user <USER>"),
        ("status=503 path=/api/v1/orders", "status=<NUM> path=<PATH>"),
        ("VM Started (Lifecycle Event)", "VM Started (Lifecycle Event)"),
    ],
)
def test_masking(message: str, masked: str) -> None:
    assert mask(message) == masked


def test_raw_tokens_line_up_with_masked_tokens() -> None:
    masked, raw = Masker().tokens("sent 1190 bytes (1.16 KB) to 10.0.0.1:80 in 12 ms")
    assert len(masked) == len(raw)
    assert dict(zip(masked, raw, strict=True))["<SIZE>"] == "1190 bytes (1.16 KB)"
    assert dict(zip(masked, raw, strict=True))["<DURATION>"] == "12 ms"


def test_a_messages_digits_do_not_change_its_masks_or_families() -> None:
    summariser = LogSummariser()
    for message in [
        "HTTP 503 from upstream",
        "status=429 quota",
        "x509 expired",
        "pod web-7f9c4 OOMKilled",
        "0x1f at 1x2",
        "pod-\u0663 ready at v\u0662 after 7 tries",  # digits a shape keeps (ARABIC-INDIC THREE, TWO)
    ]:
        parsed = summariser.parse(message)
        assert parsed.key == Masker().tokens(message)[0]
        assert sorted(parsed.families) == sorted(families_of(message))


def test_the_5xx_family_is_found_exactly_where_its_pattern_matches() -> None:
    # the quick search for the 5xx family must agree with the family's own pattern, word boundaries,
    # case and non-ASCII text included
    import random

    from opsagent.logsummary.families import FAMILIES, numeric_families

    fragments = [
        "status",
        "STATUS",
        "Http",
        "code",
        "returned",
        "x",
        "_",
        "=",
        ":",
        " ",
        "/",
        "5",
        "50",
        "502",
        "503 ",
        "504",
        "500",
        "5000",
        "a",
        "\u017ftatus",
        "\u212a",
        "é",
        "\n",
        "-",
        "9",
    ]
    rng = random.Random(24)
    messages = [
        "HTTP/1.1 503",
        "xstatus=500",
        "code:5000",
        "a502 b",
        "_502 ",
        "502 ",
        "Status: 504",
        "codestatus=500",
        "\u017ftatus 500",
        "returned  =/ 599!",
        "ok 5",
    ]
    messages += ["".join(rng.choice(fragments) for _ in range(rng.randint(1, 8))) for _ in range(20_000)]
    found = 0
    summariser = LogSummariser()
    for message in messages:
        expected = ["5xx"] if FAMILIES["5xx"].search(message) is not None else []
        found += bool(expected)
        assert numeric_families(message, ("5xx",)) == expected, message
        # and through a message's shape, as the summariser finds its families (ASCII text: with the
        # long s, which matches s only without regard to case, the shape's hints already differ)
        if message.isascii():
            assert ("5xx" in summariser.parse(message).families) == ("5xx" in families_of(message)), message
    assert 500 < found < len(messages) - 500  # both outcomes are exercised


# ---------------------------------------------------------------- template mining


def test_messages_that_differ_in_numbers_share_a_template() -> None:
    miner = TemplateMiner()
    a, _ = miner.add(mask("connection timeout after 2000 ms to postgres-orders").split())
    b, _ = miner.add(mask("connection timeout after 3000 ms to postgres-orders").split())
    assert a is b


def test_a_busy_node_finds_the_same_templates_as_comparing_each_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # A node past INDEX_FROM templates counts shared tokens from its index; the templates found, and
    # the positions each widens, must be those of comparing every template in turn (index never built)
    import random

    from opsagent.logsummary import mining

    rng = random.Random(24)
    words = ["alpha", "beta", "<NUM>", "gamma", "<*>", "delta"]
    streams = [
        ["resolve", *(rng.choice(words) if rng.random() < 0.6 else f"bn{rng.randrange(999)}" for _ in range(11))]
        for _ in range(3000)
    ]

    def mine() -> tuple[list[tuple[int | None, list[tuple[int, str]]]], list[str], list[int]]:
        miner = TemplateMiner()
        out = []
        for tokens in streams:
            template, widened = miner.add(tokens)
            out.append((template.index if template else None, widened))
        return out, [t.text for t in miner.templates], miner.merged()

    indexed = mine()
    assert max(len(node.templates) for node in _nodes(TemplateMiner(), streams)) >= mining.INDEX_FROM
    monkeypatch.setattr(mining, "INDEX_FROM", 10**9)
    assert mine() == indexed


def test_a_busy_node_indexes_its_templates_in_little_memory() -> None:
    import tracemalloc

    # 1,000 templates of one node (40 tokens, the same first word), each token its own but for a
    # shared word: the index a busy node keeps is most of the miner's memory on unique-heavy lines
    streams = [["start", *(f"w{i}x{k}" if k % 8 else "shared" for k in range(39))] for i in range(1000)]
    miner = TemplateMiner()
    tracemalloc.start()
    for tokens in streams:
        miner.add(tokens)
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(miner.templates) == 1000
    # the token strings are the caller's; templates and index take 1.4 MiB, 4.2 with a list per token
    assert size < 2.5 * 2**20


def _nodes(miner: TemplateMiner, streams: list[list[str]]) -> list[object]:
    for tokens in streams:
        miner.add(tokens)
    found, todo = [], list(miner._root.values())
    while todo:
        node = todo.pop()
        found.append(node)
        todo.extend(node.children.values())
    return found


def test_vm_started_and_vm_paused_stay_distinguishable() -> None:
    lines = [
        Line(
            at(61 + i / 10),
            "nova",
            "INFO",
            f"[instance: {i:08d}-fe1a-409b-b8cc-1e88b294cd1d] VM {state} (Lifecycle Event)",
        )
        for i, state in enumerate(["Started", "Paused", "Resumed", "Started", "Paused", "Stopped"] * 5)
    ]
    data = summarise(lines)
    text = render(data, budget_tokens=2000)
    assert "Started" in text and "Paused" in text
    templates = {t.template for t in data.templates}
    values = [v for t in data.templates for v in t.values]
    assert any("Started" in t for t in templates) or any({"Started", "Paused"} <= set(v) for v in values)


def test_words_in_one_slot_become_a_variable_once_there_are_many() -> None:
    users = ["root", "admin", "oracle", "guest", "support", "backup"]
    miner = TemplateMiner()
    ids = [miner.add(f"Failed password for {u} from <IP> port <NUM> ssh2".split())[0] for u in users * 2]
    roots = miner.merged()
    assert len({roots[t.index] for t in ids if t}) == 1


def test_a_few_words_in_one_slot_stay_separate_events() -> None:
    miner = TemplateMiner()
    ids = [miner.add(f"Instance {w} successfully on host <IP>".split())[0] for w in ["spawned", "destroyed"] * 3]
    roots = miner.merged()
    assert len({roots[t.index] for t in ids if t}) == 2


def test_merging_long_templates_holds_one_word_position_at_a_time() -> None:
    import random
    import tracemalloc

    rng = random.Random(11)

    def word() -> str:
        return "".join(rng.choice("abcdefghij") for _ in range(6))

    miner = TemplateMiner()
    # 300 events of 120 words, no two alike, and six that differ by the word at position 7 alone
    for _ in range(300):
        miner.add([word() for _ in range(120)])
    context = [word() for _ in range(120)]
    siblings = [
        miner.add([*context[:7], w, *context[8:]])[0] for w in ["alpha", "beta", "gamma", "delta", "kappa", "omega"]
    ]
    tracemalloc.start()
    roots = miner.merged()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len({roots[t.index] for t in siblings if t}) == 1
    assert len(set(roots)) == 301
    # a copy of every template without each of its words at once would be 300 x 120 copies (35 MiB)
    assert peak < 4 * 2**20


def test_a_summary_of_records_in_memory_runs_the_garbage_collector_once_at_most() -> None:
    import gc

    lines = [
        Line(at(61 + i / 1000), "api", "INFO", f"job {i} done in {i % 97} ms by worker-{i % 13}") for i in range(20_000)
    ]
    summariser = LogSummariser()
    collections = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        data = summariser.summarise(lines, baseline=BASELINE, window=WINDOW, service=None)
    finally:
        gc.callbacks.remove(seen)
    assert data.total == 20_000
    # a full collection walks every object of the process, the records and the rest of a replay too;
    # what the summary allocated is looked at once, when the collector resumes
    assert collections in ([], [0])
    assert gc.isenabled()


def test_a_summary_leaves_the_garbage_collector_as_it_found_it() -> None:
    import gc

    def broken() -> Iterator[Line]:
        yield Line(at(61), "api", "INFO", "started")
        raise OSError("the log file went away")

    with pytest.raises(OSError):
        LogSummariser().summarise(broken(), baseline=BASELINE, window=WINDOW, service=None)
    assert gc.isenabled()
    gc.disable()
    try:
        summarise([Line(at(61), "api", "INFO", "started")])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_garbage_cycles_a_stream_makes_are_freed_while_it_is_summarised(monkeypatch: pytest.MonkeyPatch) -> None:
    from opsagent.logsummary import summary

    monkeypatch.setattr(summary, "_COLLECT_EVERY", 1000)
    freed = [0]
    seen_freed = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            freed[0] += 1

    def stream() -> Iterator[Line]:
        for i in range(5000):
            Cycle()  # garbage only a collection frees: a caught exception's traceback is one
            if i == 4500:
                seen_freed.append(freed[0])
            yield Line(at(61), "api", "INFO", f"job {i} done")

    LogSummariser().summarise(stream(), baseline=BASELINE, window=WINDOW, service=None)
    assert seen_freed[0] >= 4000


def test_values_of_a_variable_are_counted_exactly() -> None:
    lines = [Line(at(61), "api", "ERROR", f"call to {svc} failed") for svc in ["payments-api"] * 7 + ["ledger-api"] * 3]
    (template,) = summarise(lines).templates
    assert template.template == "call to <*> failed"
    assert template.values == [{"payments-api": 7, "ledger-api": 3}]


def test_template_ids_are_stable_for_the_same_text() -> None:
    lines = [Line(at(61), "api", "ERROR", f"timeout after {n} ms") for n in range(10)]
    first = summarise(lines).templates[0]
    again = summarise(list(reversed(lines))).templates[0]
    assert (first.id, first.template) == (again.id, again.template)


# ---------------------------------------------------------------- accounting


def test_lines_past_the_template_limit_go_to_an_other_bucket_and_counts_add_up() -> None:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    lines = [Line(at(61 + i % 20), "api", "WARN", f"{w} subsystem degraded") for i, w in enumerate(words * 4)]
    lines += [Line(at(55), "api", "INFO", "between baseline and window")]  # in neither range
    data = summarise(lines, template_limit=3, max_templates=2)
    assert data.other is not None and data.other.count == 28 and data.templates_total == 3
    assert sum(t.count for t in data.templates) + data.unlisted + data.other.count == data.total == 40
    assert data.outside_range == 1 and sum(data.by_level.values()) == 40
    assert "matched no template" in render(data)


def test_counts_by_level_service_family_and_time_are_exact() -> None:
    lines = [
        Line(at(61 + i), "api" if i % 2 else "db", "ERROR" if i < 3 else "info", f"request {i} timed out")
        for i in range(10)
    ]
    lines += [Line(at(10), "api", "INFO", "request 99 timed out")]
    data = summarise(lines)
    assert data.by_level == {"info": 7, "error": 3}
    assert data.by_service == {"api": 5, "db": 5}
    assert data.families == {"timeout": 10} and data.baseline_families == {"timeout": 1}
    assert sum(data.histogram) == 11 and sum(data.error_histogram) == 3


# ---------------------------------------------------------------- change against the baseline


def test_new_bursting_and_vanished_templates_are_detected() -> None:
    lines = []
    for m in range(50):  # one line a minute in the baseline
        lines.append(Line(at(m), "api", "INFO", f"health check ok in {m} ms"))
        lines.append(Line(at(m), "api", "ERROR", f"retrying payment {m}"))
        lines.append(Line(at(m), "api", "INFO", f"cache warmed {m} keys"))
    for m in range(60, 90):
        lines.append(Line(at(m), "api", "INFO", f"health check ok in {m} ms"))  # same rate: neither
        lines.extend(Line(at(m + k / 10), "api", "ERROR", f"retrying payment {m}") for k in range(5))  # x5
        lines.append(Line(at(m), "api", "ERROR", f"connection refused by ledger-{m % 3}"))  # new
    data = summarise(lines)
    flags = {t.template: (t.new, t.bursting) for t in data.templates}
    assert flags["health check ok in <DURATION>"] == (False, False)
    assert flags["retrying payment <NUM>"] == (False, True)
    assert flags["connection refused by ledger-<NUM>"] == (True, True)
    assert [t.template for t in data.vanished] == ["cache warmed <NUM> keys"]
    assert data.templates[0].template == "connection refused by ledger-<NUM>"  # new errors first


# ---------------------------------------------------------------- rendering


def busy_summary() -> LogsData:
    lines = []
    for m in range(60, 90):
        for k in range(20):
            lines.append(
                Line(
                    at(m + k / 20),
                    f"svc-{k % 4}",
                    "ERROR",
                    f"upstream {k} returned 503 after {m} ms for order ord_{m}{k}",
                )
            )
            lines.append(Line(at(m + k / 20), f"svc-{k % 4}", "INFO", f"GET /v1/items/{m * k} -> 200 ({k} ms)"))
            lines.append(Line(at(m + k / 20), "db", "WARN", f"slow query on table t{k % 7} took {m} ms"))
    return summarise(lines)


@pytest.mark.parametrize("budget", [1, 3, 10, 25, 60, 120, 300, 600, 2000])
def test_rendering_never_exceeds_its_budget(budget: int) -> None:
    text = render(busy_summary(), budget_tokens=budget)
    assert estimate_tokens(text) <= budget


def test_rendering_puts_new_errors_first_with_citable_ids() -> None:
    data = busy_summary()
    text = render(data, budget_tokens=150)
    first_template = next(line for line in text.splitlines() if line.startswith("["))
    assert first_template.startswith(f"[{data.templates[0].id}] NEW error")


def test_rendering_says_when_counts_are_estimated() -> None:
    data = busy_summary().model_copy(update={"estimated": True})
    assert "estimated from a sample" in render(data, budget_tokens=100)


# ---------------------------------------------------------------- secrets


def test_secrets_are_masked_before_lines_are_mined_into_templates() -> None:
    # header values vary from line to line: mined raw, the template would read "X-Api-Key: <*>" and
    # its variable position would list the keys themselves
    keys = ["hdrLettersOnlyKeyOne", "hdrLettersOnlyKeyTwo", "hdrLettersOnlyKeyThree"]
    lines = [
        Line(at(61 + i), "api", "ERROR", f"rejected request X-Api-Key: {key} password=hunterLetters{chr(65 + i)}x")
        for i, key in enumerate(keys)
    ]
    data = LogSummariser().summarise(lines, baseline=BASELINE, window=WINDOW, service=None)
    # what was mined (templates and their values); the whole sample lines are masked at the toolbox's door
    mined = json.dumps([t.model_dump(mode="json", exclude={"sample"}) for t in data.templates])
    assert not any(key in mined for key in keys) and "hunterLetters" not in mined
    assert any("X-Api-Key: [REDACTED:secret]" in t.template for t in data.templates)


def test_a_shape_the_redaction_gate_passes_is_redacted_once_not_per_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # messages that differ only in their digits share a shape: when the gate finds none of its words
    # in the shape, no message of that shape can hold one, and the chain is not run for each of them
    from opsagent.logsummary import summary

    calls: list[str] = []

    def counted(text: str, chain: object) -> tuple[str, int]:
        calls.append(text)
        return redact(text, chain)  # type: ignore[arg-type]

    redact = summary.redact
    monkeypatch.setattr(summary, "redact", counted)
    lines = [Line(at(61), "api", "INFO", f"served order {n} in {n % 97} ms") for n in range(1000, 1500)]
    LogSummariser().summarise(lines, baseline=BASELINE, window=WINDOW, service=None)
    assert len(calls) <= 2  # not once per distinct message (500)


def test_a_secret_differing_from_a_clean_message_only_in_digits_is_still_redacted() -> None:
    # Google's OAuth tokens start "ya29.": a gate word with digits. "ya11.…" passes the gate, "ya29.…"
    # of the same shape does not: the shape's gate must read the word as a shape writes it
    token = "a0AfH6SMBxLettersAndDigits1234567890"
    lines = [
        Line(at(61), "api", "ERROR", f"upstream said ya11.{token} for order 7"),
        Line(at(62), "api", "ERROR", f"upstream said ya29.{token} for order 8"),
    ]
    data = LogSummariser().summarise(lines, baseline=BASELINE, window=WINDOW, service=None)
    mined = json.dumps([t.model_dump(mode="json", exclude={"sample"}) for t in data.templates])
    assert "ya29." + token not in mined
    assert "ya11." + token in mined or "<*>" in mined


def test_the_one_pass_search_of_a_shape_finds_every_hint_a_substring_test_finds() -> None:
    # hints inside or across one another ("timeoutofmemory" holds "timeout" and "outofmemory") must
    # all be found, as sixty substring tests find them
    import random

    from opsagent.logsummary.families import _SHAPE_HINT_SEARCH, _SHAPE_HINT_TABLE

    hints = [hint for hint, _ in _SHAPE_HINT_TABLE]
    rng = random.Random(24)
    texts = ["timeoutofmemory", "invalid token expired", "ssl", ""]
    texts += [
        "".join(rng.choice([*hints, "x", " ", "é", "\u0130", "\n"]) for _ in range(rng.randint(1, 8)))
        for _ in range(5000)
    ]
    for text in texts:
        lower = text.lower()
        expected = {i for i, hint in enumerate(hints) if hint in lower}
        found = {i for i, _, _ in _SHAPE_HINT_SEARCH.find_matches_as_indexes(lower, overlapping=True)}
        assert found == expected, text


def test_a_messages_numeric_families_found_through_its_shape_are_its_families() -> None:
    # a shape's numeric families (5xx, ratelimit, tls) are sure, maybe (checked on each message) or
    # absent; in an ASCII shape without a family's words only the branches naming digits are searched
    # (429, x509, "502 "): whatever the message, the families found through its shape are its own
    import random

    from opsagent.logsummary.families import _HINTS
    from opsagent.redaction import redact

    fragments = [*{h for hints in _HINTS.values() for h in hints}, "429", "x509", "4290", "503 ", "_", "-", " "]
    fragments += ["1", "0", "5", "9", "x", "STATUS=", "Quota", "a", "\n", "=", "/", "é"]
    rng = random.Random(24)
    messages = ["status 429 quota", "x509 4291 rate limit", "HTTP 503 ", "a429 b", "429", "code=504 ssl"]
    messages += ["".join(rng.choice(fragments) for _ in range(rng.randint(1, 9))) for _ in range(20_000)]
    summariser = LogSummariser()
    for message in messages:
        redacted = redact(message, summariser._redaction)[0]  # families are the redacted message's
        assert sorted(summariser.parse(message).families) == sorted(families_of(redacted)), message


def test_a_shapes_digit_branches_match_where_its_family_pattern_does_without_the_familys_words() -> None:
    import random

    from opsagent.logsummary.families import _DIGIT_FREE_HINTS, _SHAPE_DIGIT_BRANCHES, _SHAPE_PATTERNS, shape_of

    fragments = ["000", "0", "00", "x", "X", "_", " ", "a", "-", ".", "=", "status", "rate", "limit", "ssl", "\n"]
    rng = random.Random(7)
    shapes = [shape_of("".join(rng.choice(fragments) for _ in range(rng.randint(1, 10)))) for _ in range(20_000)]
    matched = 0
    for shape in shapes:
        lower = shape.lower()
        for name, branches in _SHAPE_DIGIT_BRANCHES.items():
            if any(h in lower for h in _DIGIT_FREE_HINTS[name]):
                continue
            expected = _SHAPE_PATTERNS[name].search(shape) is not None
            matched += expected
            assert (branches.search(shape) is not None) == expected, (name, shape)
    assert matched > 1000


def test_a_message_a_redactor_could_mask_gets_exactly_what_the_whole_chain_gives() -> None:
    # a shape redaction's gate does not pass runs only the redactors whose words it holds; when one
    # of them masks something the whole chain runs: the result is always the chain's own
    import random

    from opsagent.logsummary.families import shape_of
    from opsagent.redaction import redact

    fragments = ["password=", "hunter2hunter2", "token", " is ", "abc123def456", "Bearer ", "A" * 20, "key", "=", " "]
    fragments += [
        "api_key: ",
        "secret",
        "AKIA" + "B" * 16,
        "eyJhbGciOi.eyJzdWIiOi.sig",
        "://u:p@h",
        "cookie: x",
        "ya29.",
    ]
    fragments += ["0", "7", "[REDACTED", "x-api-key:", "pwd", "Authorization: ", "SharedAccessKey=", "9" * 20]
    rng = random.Random(11)
    messages = ["".join(rng.choice(fragments) for _ in range(rng.randint(1, 7))) for _ in range(5_000)]
    summariser = LogSummariser()
    changed = 0
    for message in messages:
        expected = redact(message, summariser._redaction)[0]
        changed += expected != message
        assert summariser._redacted(message, summariser._steps(shape_of(message))) == expected, message
    assert 500 < changed < 4_500  # both outcomes are exercised


def test_a_message_the_redaction_gate_stops_runs_only_the_redactors_whose_words_it_holds() -> None:
    from opsagent.redaction import HINTS

    ran: list[str] = []

    def redactor(name: str, word: str) -> object:
        def step(text: str) -> tuple[str, int]:
            ran.append(name)
            return text, 0

        setattr(step, HINTS, (word,))
        return step

    chain = [redactor("keys", "key"), redactor("cookies", "cookie"), redactor("tokens", "token")]
    lines = [Line(at(61), "api", "INFO", f"keyring {n} unlocked") for n in range(20)]
    LogSummariser(redaction=chain).summarise(lines, baseline=BASELINE, window=WINDOW, service=None)  # type: ignore[arg-type]
    assert ran and set(ran) == {"keys"}


def test_the_parsed_message_cache_stays_within_its_bound_and_changes_no_summary() -> None:
    # more distinct messages than the bound, of a few shapes, summarised twice by one summariser (as a
    # replay summarises the same lines once per scope): the cache is cleared and filled again
    lines = [
        Line(at(m % 90), "api", "ERROR" if i % 7 == 0 else "INFO", text)
        for i, m in enumerate(range(600))
        for text in (
            f"order {i * 7919 % 100003} paid in {m % 50} ms",
            f"user u{i} logged in from 10.0.{i % 256}.{m % 9}",
        )
    ]
    bounded = LogSummariser(message_cache_size=64)
    first = bounded.summarise(lines, baseline=BASELINE, window=WINDOW, service=None)
    assert len(bounded._parsed) <= 64
    again = bounded.summarise(lines, baseline=BASELINE, window=WINDOW, service=None)
    assert len(bounded._parsed) <= 64
    roomy = summarise(lines, message_cache_size=100_000)
    assert first == again == roomy
    assert roomy.total + roomy.outside_range == 1200
