"""readers.inspect --report's page in a real browser (headless Chromium over its DevTools
pipe, tests/chromium.py): it renders without console errors, asks for nothing but its own
data: images, runs no script, its images decode to the sizes it states, and the figures the
browser's DOM holds are dataset.json's; a page that asked for more would be caught. The
datasets and pages: tests/report_pages.py."""
import json

import chromium
import numpy as np
import pytest
from helpers import read_dataset_json
from report_pages import PAGES, check_figures, read_page, sheets_of


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not chromium.CHROMIUM:
        pytest.skip(chromium.MISSING)
    browser = chromium.Chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield browser
    browser.close()


_DOM = """JSON.stringify({
  keys: Object.fromEntries([...document.querySelectorAll('[data-key]')]
                           .map(e => [e.dataset.key, e.textContent])),
  images: [...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight,
                                         i.getAttribute('width'), i.getAttribute('height')]),
  scripts: document.scripts.length,
  sections: [...document.querySelectorAll('section')].map(s => s.id),
  height: document.documentElement.scrollHeight})"""


@pytest.mark.parametrize("name", PAGES)
def test_the_page_renders_offline_in_a_browser(reports, browser, name, tmp_path):
    path, page = reports[name]
    tab = browser.open(f"file://{page}")
    assert not tab.errors()
    requests = tab.requests()
    assert requests[0] == f"file://{page}"
    assert all(url.startswith("data:image/png;base64,") for url in requests[1:]), \
        [u[:80] for u in requests]
    dom = json.loads(tab.value(_DOM))
    check_figures(dom["keys"], read_dataset_json(path))
    assert dom["keys"] == read_page(page).keys
    assert dom["scripts"] == 0
    assert dom["sections"] == ["summary", "splits", "statistics", "distributions", "failures",
                               "sheets", "shuffle", "verify"]
    assert len(dom["images"]) == len(sheets_of(page)) > 0
    for complete, width, height, said_width, said_height in dom["images"]:
        assert complete and (width, height) == (int(said_width), int(said_height))
    shot = tab.screenshot()
    shot.save(tmp_path / "shot.png")
    pixels = np.asarray(shot.convert("L"))
    assert shot.width >= 780 and pixels.std() > 10   # drawn, not a blank page
    assert dom["height"] > 2 * shot.height


def test_the_browser_check_sees_a_request_and_a_script(reports, browser, tmp_path):
    """The checks above would fail a page that asked for anything: the same page with an
    image from a server and a script added is caught twice over."""
    _, page = reports["latent"]
    text = open(page, encoding="utf-8").read().replace(
        "</body>", "<img src='http://127.0.0.1:9/x.png'><script>console.error('x')</script>"
                   "</body>")
    tampered = tmp_path / "tampered.html"
    tampered.write_text(text, encoding="utf-8")
    tab = browser.open(f"file://{tampered}")
    assert "http://127.0.0.1:9/x.png" in tab.requests()
    errors = " ".join(tab.errors())
    assert "Content Security Policy" in errors and "http://127.0.0.1:9/x.png" in errors
