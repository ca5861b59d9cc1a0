import pytest

from opsagent.selector import SelectorError, parse


def test_parses_name_and_matchers() -> None:
    sel = parse('http_requests{service="a", code=~"5..", pod!="x"}')
    assert sel.name == "http_requests"
    assert [(m.label, m.op, m.value) for m in sel.matchers] == [
        ("service", "=", "a"),
        ("code", "=~", "5.."),
        ("pod", "!=", "x"),
    ]
    assert sel.matchers[1].matches("503") and not sel.matchers[1].matches("200")


def test_vector_constant() -> None:
    assert parse("vector(1)").constant == 1.0


@pytest.mark.parametrize("query", ["rate(x[5m])", "x{service=}", "sum by (a) (x)"])
def test_rejects_what_replay_cannot_evaluate(query: str) -> None:
    with pytest.raises(SelectorError):
        parse(query)
