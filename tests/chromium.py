"""Headless Chromium for tests, a real browser as tests/gcs_emulator.py is a real store:
Debian's `chromium` driven over its DevTools protocol, to open a page and see what it
logs, asks for and draws (tests/test_report.py). `CHROMIUM` is None where it is not
installed; `MISSING` says why a test skips then.
"""
from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import select
import shutil
import subprocess
import time

from PIL import Image

CHROMIUM = shutil.which("chromium")
MISSING = ("chromium is not installed (`apt-get install -y chromium`, which .ci/run "
               "tries): the report's browser checks need it")


class Chromium:
    """Headless Chromium driven over its DevTools pipe (`--remote-debugging-pipe`: the
    browser reads commands on fd 3 and writes answers and events on fd 4, each a JSON
    message ended by a NUL byte): no websocket library, no port."""

    def __init__(self, profile):
        commands, self._commands = os.pipe()
        self._answers, answers = os.pipe()
        # above 4, so that the child's dup2 onto 3 and 4 never overwrites its source
        keep = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (commands, answers)]
        os.close(commands)
        os.close(answers)

        def onto_3_and_4():
            os.dup2(keep[0], 3)
            os.dup2(keep[1], 4)

        self.process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", f"--user-data-dir={profile}", "--no-first-run",
             "about:blank"], close_fds=False, preexec_fn=onto_3_and_4,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in keep:
            os.close(fd)
        self._buffer, self.events, self._id = b"", [], 0

    def _next(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._answers], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed its pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params=None, session=None, timeout: float = 60) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._next(deadline)
            if answer.get("id") == self._id:
                assert "error" not in answer, (method, answer["error"])
                return answer["result"]
            self.events.append(answer)

    def until(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._next(deadline))
        return next(e for e in self.events if e.get("method") == method)

    def open(self, url: str) -> "Tab":
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target,
                                                      "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=session)
        self.events.clear()
        self.call("Page.navigate", {"url": url}, session=session)
        self.until("Page.loadEventFired")
        return Tab(self, session)

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except (EOFError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._commands)
        os.close(self._answers)


class Tab:
    def __init__(self, browser: Chromium, session: str):
        self.browser, self.session = browser, session

    def value(self, expression: str):
        result = self.browser.call("Runtime.evaluate", {"expression": expression,
                                                        "returnByValue": True},
                                   session=self.session)
        assert "exceptionDetails" not in result, result
        return result["result"]["value"]

    def events(self, *methods: str) -> list[dict]:
        return [e["params"] for e in self.browser.events
                if e.get("method") in methods and e.get("sessionId") == self.session]

    def errors(self) -> list[str]:
        """Console errors and warnings, exceptions, and the browser's own log errors
        (a Content-Security-Policy refusal among them)."""
        said = [e["entry"]["text"] for e in self.events("Log.entryAdded")
                if e["entry"]["level"] in ("error", "warning")]
        said += [" ".join(str(a.get("value")) for a in e["args"])
                 for e in self.events("Runtime.consoleAPICalled")
                 if e["type"] in ("error", "warning", "assert")]
        said += [e["exceptionDetails"]["text"] for e in self.events("Runtime.exceptionThrown")]
        return said

    def requests(self) -> list[str]:
        return [e["request"]["url"] for e in self.events("Network.requestWillBeSent")]

    def screenshot(self) -> Image.Image:
        data = self.browser.call("Page.captureScreenshot", {"format": "png"},
                                 session=self.session)["data"]
        return Image.open(io.BytesIO(base64.b64decode(data)))
