"""The report page as a browser shows it: Debian's Chromium, headless, loads the page the service
serves for an investigated incident; the DOM it built holds the verdict and the charts, and its
screenshot shows them drawn (the verdict's colour, the series', the limit's).

Skipped, with the reason, only where Chromium is not installed or cannot start here."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from opsagent.service.app import create_app
from opsagent.service.charts import COLOURS
from tests.service_support import AUTH, notification, serving, settings, wait_for

#: What Chromium needs on these machines: root (no sandbox), no GPU, and no background traffic to
#: the closed network (/work/.library/env/machines/python.md).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
VERDICT_GREEN = "#1a7f37"  # the confirmed badge (opsagent/service/pages.py)


def _browser(tmp_path: Path) -> list[str]:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (make test installs Debian's chromium with the other system deps)")
    command = [found, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    try:
        subprocess.run([*command, "--dump-dom", "about:blank"], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"chromium cannot start here: {exc}")
    return command


@pytest.fixture
def page_url(tmp_path: Path) -> Iterator[str]:
    app = create_app(settings(tmp_path, public_reads=True), runner="thread", poll_s=0.1)
    with serving(app) as base:
        accepted = httpx.post(f"{base}/webhook/alertmanager", json=notification(), headers=AUTH, timeout=10)
        incident_id = accepted.json()["incident_id"]

        def done() -> bool:
            body = httpx.get(f"{base}/incidents/{incident_id}", timeout=10).json()
            return body["incident"]["investigation"] == "done"

        wait_for(done, timeout_s=60)
        yield f"{base}/incidents/{incident_id}.html"


def _pixels_near(image: Image.Image, colour: str, *, box: tuple[int, int, int, int] | None = None) -> int:
    want = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    region = image.crop(box) if box else image
    return sum(
        count
        for count, rgb in region.getcolors(maxcolors=1 << 20) or []
        if all(abs(a - b) <= 24 for a, b in zip(rgb[:3], want, strict=True))
    )


def test_chromium_renders_the_verdict_and_the_charts(page_url: str, tmp_path: Path) -> None:
    command = _browser(tmp_path)
    dom = subprocess.run([*command, "--dump-dom", page_url], check=True, capture_output=True, timeout=60).stdout
    text = dom.decode("utf-8")
    verdict = text[text.index('class="panel verdict"') :][:600]
    assert "confirmed" in verdict and "config_change" in verdict and "order-service" in verdict
    assert text.count("<svg") >= 3 and text.count("<polyline") >= 3  # the browser parsed every chart
    assert "threadpool_active peaked at 4/4" in text  # a chart's caption: the finding it illustrates

    shot = tmp_path / "report.png"
    subprocess.run(
        [*command, "--window-size=1280,2400", f"--screenshot={shot}", page_url],
        check=True,
        capture_output=True,
        timeout=60,
    )
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 2400)
    assert _pixels_near(image, VERDICT_GREEN, box=(0, 0, 1280, 400)) > 50  # the verdict, at the top
    assert _pixels_near(image, COLOURS["series"]) > 300  # series drawn
    assert _pixels_near(image, COLOURS["limit"]) > 100  # and the limits, in their own colour
    assert _pixels_near(image, COLOURS["onset"]) > 50
