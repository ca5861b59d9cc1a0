"""Kubernetes faults recorded by someone else (../shared/datasets/cloudopsbench-dev, Cloud-OpsBench
converted): floors a little under what benchmarks/rca_bench.py measured with hybrid, per system and
per fault category, so a regression in how the engine reads the cluster fails CI. Skipped when
../shared is not here. Nothing of the data set is copied here: the test reads it where it lies."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from opsagent.fixtures import load
from opsagent.models import Report
from opsagent.pipeline import investigate_recording
from opsagent.plan import load_default_playbooks
from opsagent.scoreboard import IncidentScore, score
from tests.conftest import HANG_GUARD_S, ROOT

DATASET = ROOT.parent / "shared" / "datasets" / "cloudopsbench-dev"
pytestmark = [  # its shared replay of the data set passed the suite's 300 s beside two CPU hogs
    pytest.mark.skipif(not DATASET.is_dir(), reason="../shared/datasets/cloudopsbench-dev is not here"),
    pytest.mark.timeout(HANG_GUARD_S),
]

#: Component AC@1 floors per system (the slug's middle part), a little under what hybrid measured
#: (benchmarks/rca_bench.py --sets cloudopsbench: ob 0.87, tt 0.91; before this work 0.36 and 0.49;
#: ob 0.84 before callers' wrong addresses and what they fail to get were read, tt 0.81 before calls
#: into a pod were read from the latency series where there are no traces).
SYSTEM_FLOORS = {"ob": 0.84, "tt": 0.88}
#: Component AC@1 floors per (system, the benchmark's fault category), where the cluster's objects
#: show the fault: a little under what was measured.
CATEGORY_FLOORS = {
    ("ob", "Scheduling_Fault"): 0.95,
    ("ob", "Startup_Fault"): 0.95,
    ("ob", "Admission_Fault"): 0.70,
    ("ob", "Runtime_Fault"): 0.95,
    ("ob", "Infrastructure_Fault"): 0.60,
    # callers that cannot connect to, or fail to get anything from, a component whose pods are ready,
    # and callers given a wrong address (measured 0.47; 0.26 before the last two, 0.11 before the first)
    ("ob", "Service_Routing_Fault"): 0.42,
    ("tt", "Startup_Fault"): 0.95,
    # a database refusing its crash-looping callers for too many connections is named (measured 1.00)
    ("tt", "Runtime_Fault"): 0.95,
    # a path the entry answers 404 Not Found names the component behind the broken route (measured 0.75;
    # 0.50 before)
    ("tt", "Service_Routing_Fault"): 0.65,
    # a pod whose served latency rose with no callee rising alike is where calls into it slowed
    # (measured 0.81; 0.38 before, 0.31 before a container that exited only while starting was no crash loop)
    ("tt", "Performance_Fault"): 0.75,
}
#: Component and kind both right at top-1, over every case (measured 0.795; 0.61 before crash loops
#: were named by their containers' last log lines, 0.714 before unreachable Services, probe kills
#: between ready spells and exhausted databases were named, 0.745 before routes answering not found,
#: 0.759 before a store restarted read-only was named a changed setting, 0.773 before callers' wrong
#: addresses and what they fail to get were read; measured 0.859 with calls into a pod read from the
#: latency series where there are no traces, 0.795 before; 0.864 once a confirmed scheduling failure
#: outranked the code exception its failed calls look like).
COMPONENT_AND_KIND_FLOOR = 0.84
#: Component and kind both right at top-1 where a crash-looping container's last lines name the cause
#: (credentials or a connection refused, a name that does not resolve) or a database it cannot get a
#: connection from, or a store its callers find read-only, or a path its entry answers not found:
#: measured 1.00 and 0.67, 0.00 or 0.38 before the last words were read (Runtime 0.91 before callers'
#: read-only refusals were read, Service_Routing 0.42 before the entry's access log was read); ob
#: Service_Routing, where callers' wrong addresses and what they fail to get name the Service or the
#: caller: measured 0.42, 0.16 before. Performance: a pod network delay, named network degradation
#: from its latency rise that no callee explains: measured tt 0.69, ob 1.00 (0.00 and 0.57 before).
CATEGORY_KIND_FLOORS = {
    ("tt", "Performance_Fault"): 0.62,
    ("ob", "Performance_Fault"): 0.95,
    ("tt", "Runtime_Fault"): 0.95,
    ("tt", "Service_Routing_Fault"): 0.58,
    ("ob", "Service_Routing_Fault"): 0.37,
}


#: Confirmed verdicts: at least this many, and at least this share right on component and kind
#: (measured 102 of 220, every one right, once the judge read an object's own field naming the fault
#: as direct evidence and a code exception a network delay explains stopped being proven; 1 before,
#: a network delay confirmed as a code exception).
CONFIRMED_FLOOR, CONFIRMED_PRECISION_FLOOR = 95, 0.95


@pytest.fixture(scope="module")
def runs() -> list[tuple[str, str, Report, IncidentScore, str]]:
    """(system, category, report, score, the truth's object type) per case."""
    books = load_default_playbooks()

    async def all_of() -> list[tuple[str, str, Report, IncidentScore, str]]:
        out = []
        for d in sorted(p for p in DATASET.iterdir() if (p / "incident.yaml").exists()):
            recording, truth = load(d)
            assert truth is not None
            report = await investigate_recording(recording, playbooks=books, strategy_name="hybrid")
            extra = truth.model_extra or {}
            category, kind = str(extra.get("raw_fault_taxonomy", "?")), str(truth.object_type or "app")
            out.append((d.name.split("-")[1], category, report, score(d.name, report, truth), kind))
        return out

    return asyncio.run(all_of())


def _ac1(chosen: list[IncidentScore]) -> float:
    return sum(s.hit1 for s in chosen) / len(chosen)


def test_each_system_finds_the_broken_component_at_least_as_often_as_measured(runs: list) -> None:
    by_system: dict[str, list[IncidentScore]] = defaultdict(list)
    for system, _, _, s, _ in runs:
        by_system[system].append(s)
    for system, floor in SYSTEM_FLOORS.items():
        assert _ac1(by_system[system]) >= floor, (system, [s.slug for s in by_system[system] if not s.hit1])


def test_each_category_the_cluster_shows_stays_above_its_floor(runs: list) -> None:
    by_category: dict[tuple[str, str], list[IncidentScore]] = defaultdict(list)
    for system, category, _, s, _ in runs:
        by_category[(system, category)].append(s)
    for key, floor in CATEGORY_FLOORS.items():
        assert _ac1(by_category[key]) >= floor, (key, [s.slug for s in by_category[key] if not s.hit1])


def test_component_and_kind_are_right_together(runs: list) -> None:
    right = sum(1 for _, _, _, s, _ in runs if s.hit1 and s.top and s.top[0][1] == s.truth_kind)
    assert right / len(runs) >= COMPONENT_AND_KIND_FLOOR


def test_a_crash_loop_is_named_by_what_its_containers_last_lines_say(runs: list) -> None:
    by_category: dict[tuple[str, str], list[IncidentScore]] = defaultdict(list)
    for system, category, _, s, _ in runs:
        by_category[(system, category)].append(s)
    for key, floor in CATEGORY_KIND_FLOORS.items():
        chosen = by_category[key]
        right = [s for s in chosen if s.hit1 and s.top and s.top[0][1] == s.truth_kind]
        assert len(right) / len(chosen) >= floor, (key, [(s.slug, s.top[:1]) for s in chosen if s not in right])


def test_a_namespace_or_a_node_can_be_the_answer(runs: list) -> None:
    """Quota faults name the namespace, a node whose kubelet stopped names the node: suspects are
    not only services (measured: 22 of the 32 such truths first)."""
    beyond = [(s, kind) for _, _, _, s, kind in runs if kind in ("namespace", "node")]
    assert beyond and sum(s.hit1 for s, _ in beyond) >= 20, [s.slug for s, _ in beyond if not s.hit1]


def test_every_investigation_over_kubernetes_state_names_a_suspect(runs: list) -> None:
    assert all(r.suspects for _, _, r, _, _ in runs), [s.slug for _, _, r, s, _ in runs if not r.suspects]


def test_confirmed_verdicts_name_the_broken_component_and_its_kind(runs: list) -> None:
    """A confirmed verdict is what an on-call engineer acts on without looking further: where the
    cluster's objects name the fault (a quota's refusal, the scheduler's reason, an image that cannot
    be pulled), the judge confirms it, and what it confirms is right."""
    confirmed = [(r, s) for _, _, r, s, _ in runs if r.status == "confirmed" and r.root_cause is not None]
    right = [s for r, s in confirmed if (r.root_cause.component, r.root_cause.kind) == (s.truth_service, s.truth_kind)]
    wrong = [(s.slug, r.root_cause.component, r.root_cause.kind) for r, s in confirmed if s not in right]
    assert len(confirmed) >= CONFIRMED_FLOOR, len(confirmed)
    assert len(right) / len(confirmed) >= CONFIRMED_PRECISION_FLOOR, wrong
