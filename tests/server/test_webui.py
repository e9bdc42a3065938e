"""The web chat page at / (src/server/webui/index.html; docs/server.md "Web chat page"): its
HTTP headers over plain HTTP, and the page itself in a real browser, Debian's headless
Chromium driven by selenium through the system chromedriver. In the browser: a reply streams
in (the assistant bubble grows while the stream runs), Stop cancels the request on the
server (kipp_requests_cancelled_total) and leaves the page usable, the settings reach the
request, reasoning is shown collapsed, the conversation survives a reload, a model reply
with markup cannot run script, the screenshot is not blank, and the API key is asked for on
a 401 and kept. Chromium or chromedriver missing is a failure (scripts/setup.sh installs
them), not a skip. The generating server runs one thread, so a reply takes long enough on
an idle machine to be watched and stopped; every wait is explicit and generous."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import socket
import time
from pathlib import Path

import pytest

from conftest import API_KEY, MODEL_NAME, ROOT, Srv, curl, start_server

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PAGE_SRC = ROOT / "src" / "server" / "webui" / "index.html"
WAIT_S = 60      # generous: a loaded 2-core machine runs the browser beside the server
LONG = 450       # max tokens for the reply that is stopped (the context is 512)


# ---- plain HTTP ---------------------------------------------------------------------------

def inline_hashes(html: bytes, tag: bytes) -> list[str]:
    body = re.sub(rb"<!--.*?-->", b"", html, flags=re.S)
    return ["'sha256-" + base64.b64encode(hashlib.sha256(m.group(1)).digest()).decode() + "'"
            for m in re.finditer(rb"<" + tag + rb">(.*?)</" + tag + rb">", body, flags=re.S)]


def csp_directives(csp: str) -> dict:
    out = {}
    for part in csp.split(";"):
        words = part.split()
        if words:
            out[words[0]] = words[1:]
    return out


def test_page_headers_and_body(server):
    src = PAGE_SRC.read_bytes()
    r = curl(server.url + "/")
    assert r.status == 200, r
    assert r.headers.get("content-type") == "text/html; charset=utf-8", r.headers
    assert r.body == src, "the served page is not src/server/webui/index.html (stale build?)"
    assert r.headers.get("x-content-type-options") == "nosniff"
    csp = r.headers.get("content-security-policy", "")
    d = csp_directives(csp)
    assert d.get("default-src") == ["'none'"], csp
    assert d.get("connect-src") == ["'self'"], csp
    assert d.get("frame-ancestors") == ["'none'"], csp
    assert d.get("base-uri") == ["'none'"] and d.get("form-action") == ["'none'"], csp
    # only this page's own inline elements, by hash: no origins, no 'unsafe-inline'
    assert d.get("script-src") == inline_hashes(src, b"script") and d["script-src"], csp
    assert d.get("style-src") == inline_hashes(src, b"style") and d["style-src"], csp
    assert "http" not in csp and "*" not in csp and "unsafe" not in csp, csp
    assert curl(server.url + "/index.html").body == src
    # HEAD: the same headers, no body (read to EOF: curl -X HEAD would wait for one)
    with socket.create_connection((server.host, server.port), timeout=30) as sock:
        sock.sendall(b"HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hh = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    assert lines[0].startswith("HTTP/1.1 200") and rest == b"", raw[:300]
    assert hh.get("content-length") == str(len(src)), hh
    assert hh.get("content-security-policy") == csp and hh.get("content-type") == r.headers["content-type"]
    for path in ("/index.htm", "/chat", "/v1"):
        nf = curl(server.url + path)
        assert nf.status == 404 and nf.json()["error"]["type"] == "not_found_error", (path, nf)
    wrong = curl(server.url + "/", method="POST", body="{}")
    assert wrong.status == 405, wrong
    assert server.metrics().get("kipp_requests_total", endpoint="webui", status="200") >= 2


def test_page_needs_no_key(auth_server):
    assert curl(auth_server.url + "/").status == 200
    assert curl(auth_server.url + "/v1/models").status == 401


# ---- the browser --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def driver():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: the web page test needs Debian's chromium and "
                    "chromium-driver (scripts/setup.sh installs them)", pytrace=False)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is not installed in the venv (scripts/setup.sh installs it)",
                    pytrace=False)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1100,850", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(WAIT_S)
    d.set_script_timeout(WAIT_S)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def ui_server() -> Srv:
    """Its own server: one compute thread (a reply lasts seconds), its own counters."""
    proc = start_server("webui", threads="1")
    yield Srv(proc)
    proc.stop()


def wait(d, cond, what: str, timeout: float = WAIT_S):
    from selenium.webdriver.support.ui import WebDriverWait
    try:
        return WebDriverWait(d, timeout, poll_frequency=0.05).until(lambda _: cond())
    except Exception as e:
        status = d.execute_script("return document.getElementById('status').textContent")
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; "
                             f"the page's status line: {status!r}") from e


def js(d, script: str, *args):
    return d.execute_script(script, *args)


def open_page(d, srv: Srv, fresh: bool = True):
    if fresh:  # every test starts from an empty browser store (cleared on another page)
        d.get(srv.url + "/health")
        js(d, "localStorage.clear()")
    d.get(srv.url + "/")
    wait(d, lambda: js(d, "return document.getElementById('model').textContent") == srv.model,
         "the model name from /v1/models")


def set_field(d, elem_id: str, value):
    """Sets a settings field as typing would (the page saves on 'input')."""
    js(d, "const e = document.getElementById(arguments[0]);"
          "if (e.type === 'checkbox') e.checked = arguments[1]; else e.value = arguments[1];"
          "e.dispatchEvent(new Event('input')); e.dispatchEvent(new Event('change'));",
       elem_id, value)


def send(d, text: str):
    from selenium.webdriver.common.by import By
    box = d.find_element(By.ID, "input")
    box.send_keys(text)
    d.find_element(By.ID, "send").click()


def last_reply(d) -> dict:
    return js(d, """
        const els = document.querySelectorAll('#list .msg.assistant');
        const el = els[els.length - 1];
        if (!el) return null;
        const d = el.querySelector('details.think');
        return {text: el.querySelector('.content').textContent,
                html: el.querySelector('.content').innerHTML,
                streaming: el.classList.contains('streaming'),
                note: el.querySelector('.note').textContent,
                think_shown: !d.hidden, think_open: d.open,
                think: d.querySelector('.think-body').textContent,
                summary: d.querySelector('summary').textContent};""")


def wait_reply_done(d, what: str) -> dict:
    wait(d, lambda: (last_reply(d) or {}).get("streaming") is False, what)
    return last_reply(d)


def controls(d) -> dict:
    return js(d, """const s = document.getElementById('send'), t = document.getElementById('stop');
        return {send: !s.hidden && !s.disabled && s.offsetParent !== null, stop: !t.hidden};""")


def cancelled(srv: Srv) -> float:
    return srv.metrics().get("kipp_requests_cancelled_total")


def test_reply_streams_in(driver, ui_server):
    open_page(driver, ui_server)
    set_field(driver, "temperature", "0")   # greedy: the random model never ends early
    set_field(driver, "max-tokens", "120")
    # every change of the last reply's text, as the page paints it
    js(driver, """window.__growth = [];
        const list = document.getElementById('list');
        new MutationObserver(function () {
          const els = list.querySelectorAll('.msg.assistant');
          const el = els[els.length - 1];
          if (!el) return;
          const n = el.querySelector('.content').textContent.length, g = window.__growth;
          if (!g.length || g[g.length - 1][1] !== n)
            g.push([performance.now(), n, el.classList.contains('streaming')]);
        }).observe(list, {childList: true, subtree: true, characterData: true});""")
    send(driver, "Tell me about rivers.")
    r = wait_reply_done(driver, "the reply to finish")
    growth = js(driver, "return window.__growth")
    during = [n for _, n, streaming in growth if streaming and n > 0]
    assert len(set(during)) >= 3, f"the reply did not grow while it streamed: {growth}"
    assert during == sorted(during), growth
    assert min(during) < len(r["text"]) and max(during) <= len(r["text"]), (r, growth)
    assert r["note"] == "Stopped at the token limit.", r   # max tokens reached the request
    assert controls(driver) == {"send": True, "stop": False}
    # the conversation survives a reload; "New chat" clears it
    stored = json.loads(js(driver, "return localStorage.getItem('kipp.chat')"))
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"], stored
    assert stored["messages"][1]["content"] == r["text"]
    open_page(driver, ui_server, fresh=False)
    assert js(driver, "return document.querySelectorAll('#list .msg').length") == 2
    assert last_reply(driver)["text"] == r["text"]
    assert js(driver, "return document.getElementById('max-tokens').value") == "120"
    driver.find_element("id", "new-chat").click()
    assert js(driver, "return document.querySelectorAll('#list .msg').length") == 0
    assert json.loads(js(driver, "return localStorage.getItem('kipp.chat')"))["messages"] == []


def test_stop_cancels_on_the_server(driver, ui_server):
    open_page(driver, ui_server)
    set_field(driver, "temperature", "0")
    set_field(driver, "max-tokens", str(LONG))
    ui_server.wait_idle()
    c0 = cancelled(ui_server)
    g0 = ui_server.metrics().get("kipp_generated_tokens_total")
    send(driver, "Talk forever about rivers.")
    wait(driver, lambda: len((last_reply(driver) or {}).get("text", "")) > 0, "the first tokens")
    assert controls(driver)["stop"], "no Stop button while the reply streams"
    driver.find_element("id", "stop").click()
    r = wait_reply_done(driver, "the page to leave the streaming state after Stop")
    assert r["note"] == "Stopped.", r
    deadline = time.monotonic() + WAIT_S
    while cancelled(ui_server) <= c0:
        assert time.monotonic() < deadline, "the server did not cancel the stopped request"
        time.sleep(0.05)
    m = ui_server.wait_idle(timeout=WAIT_S)
    generated = m.get("kipp_generated_tokens_total") - g0
    assert generated < LONG, f"the stopped reply ran to the end ({generated} tokens)"
    # usable again: another message gets a whole reply
    assert controls(driver) == {"send": True, "stop": False}
    set_field(driver, "max-tokens", "4")
    send(driver, "Again.")
    r2 = wait_reply_done(driver, "the reply after Stop")
    assert r2["note"] == "Stopped at the token limit.", r2   # four tokens may be no text yet
    assert js(driver, "return document.querySelectorAll('#list .msg').length") == 4


def test_server_error_is_shown(driver, ui_server):
    open_page(driver, ui_server)
    set_field(driver, "system", "word " * 3000)    # a prompt past the 512-token context: 400
    send(driver, "hi")
    r = wait_reply_done(driver, "the refused request")
    assert r["note"].startswith("Error: ") and "(400)" in r["note"], r
    assert js(driver, "return document.getElementById('status').className") == "error"
    set_field(driver, "system", "")
    set_field(driver, "max-tokens", "2")
    send(driver, "hi")
    r = wait_reply_done(driver, "the reply after the error")
    assert r["note"] == "Stopped at the token limit.", r


def test_screenshot_is_not_blank_and_narrow_fits(driver, ui_server):
    open_page(driver, ui_server)
    set_field(driver, "max-tokens", "24")
    send(driver, "Write a short poem about **rain**.")
    wait_reply_done(driver, "the reply")
    png = driver.get_screenshot_as_png()
    try:
        from PIL import Image
        img = Image.open(io.BytesIO(png)).convert("RGB")
        w, h = img.size
        counts = sorted((c for c, _ in img.getcolors(maxcolors=w * h)), reverse=True)
    except ImportError:
        import numpy as np
        from matplotlib import image as mpimg
        a = (mpimg.imread(io.BytesIO(png), format="png")[..., :3] * 255).astype(np.uint8)
        h, w = a.shape[:2]
        _, cnt = np.unique(a.reshape(-1, 3), axis=0, return_counts=True)
        counts = sorted(cnt.tolist(), reverse=True)
    assert w >= 800 and h >= 500, (w, h)
    assert len(counts) >= 50, f"the screenshot has {len(counts)} colours: blank or unstyled"
    assert counts[0] < 0.97 * w * h, "one colour covers the whole screenshot"
    # a phone-width window: nothing overflows sideways, the composer stays on screen
    driver.set_window_size(380, 760)
    try:
        wait(driver, lambda: js(driver, "return window.innerWidth") <= 400, "the narrow window")
        fit = js(driver, """const r = document.getElementById('send').getBoundingClientRect();
            return {over: document.documentElement.scrollWidth - window.innerWidth,
                    send_visible: r.right <= window.innerWidth && r.bottom <= window.innerHeight};""")
        assert fit["over"] <= 0 and fit["send_visible"], fit
    finally:
        driver.set_window_size(1100, 850)


STUB_FETCH = """
    // the chat request answered by a canned SSE stream (the model cannot be made to write
    // markup); every other request goes to the server
    window.__sent = [];
    window.__pwned = 0;
    const real = window.fetch;
    window.fetch = function (url, opts) {
      if (!String(url).endsWith('/v1/chat/completions')) return real.apply(this, arguments);
      window.__sent.push(JSON.parse(opts.body));
      const enc = new TextEncoder(), events = window.__events;
      const body = new ReadableStream({start(c) {
        for (const e of events) c.enqueue(enc.encode('data: ' + JSON.stringify(e) + '\\n\\n'));
        c.enqueue(enc.encode('data: [DONE]\\n\\n'));
        c.close();
      }});
      return Promise.resolve(new Response(body, {status: 200,
                                                  headers: {'Content-Type': 'text/event-stream'}}));
    };"""

HOSTILE = ('Here is **bold**, `code` and [a link](https://example.com/a_b_c).\n\n'
           '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">\n'
           '[x](javascript:window.__pwned=3) <svg onload="window.__pwned = 4"></svg>\n\n'
           '- one\n- two\n\n```html\n<img src=y onerror="window.__pwned = 5">\n```\n')


def delta(**d):
    return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def test_reasoning_settings_and_hostile_markup(driver, ui_server):
    open_page(driver, ui_server)
    js(driver, STUB_FETCH)
    js(driver, "window.__events = arguments[0]", [
        delta(role="assistant", content=""),
        delta(reasoning_content="Let me think about <b>this</b>."),
        delta(content=HOSTILE[:40]), delta(content=HOSTILE[40:]),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}])
    set_field(driver, "system", "You are terse.")
    set_field(driver, "temperature", "0.25")
    set_field(driver, "max-tokens", "77")
    send(driver, "Show me markup.")
    r = wait_reply_done(driver, "the canned reply")
    req = js(driver, "return window.__sent[0]")
    assert req["model"] == MODEL_NAME and req["stream"] is True, req
    assert req["temperature"] == 0.25 and req["max_tokens"] == 77, req
    assert req["chat_template_kwargs"] == {"enable_thinking": True}, req
    assert req["messages"] == [{"role": "system", "content": "You are terse."},
                               {"role": "user", "content": "Show me markup."}], req
    # reasoning: shown, collapsed, as text
    assert r["think_shown"] and not r["think_open"] and r["summary"] == "Reasoning", r
    assert r["think"] == "Let me think about <b>this</b>.", r
    # Markdown rendered; the model's markup shown as text, never run
    found = js(driver, """const c = [...document.querySelectorAll('#list .msg.assistant .content')].pop();
        return {strong: c.querySelectorAll('strong').length, code: c.querySelectorAll('code').length,
                pre: c.querySelectorAll('pre').length, li: c.querySelectorAll('li').length,
                bad: c.querySelectorAll('script, img, svg, iframe, object, embed, style').length,
                handlers: [...c.querySelectorAll('*')].flatMap(e => [...e.attributes])
                            .filter(a => a.name.startsWith('on')).length,
                links: [...c.querySelectorAll('a')].map(a => a.getAttribute('href'))};""")
    assert found["strong"] == 1 and found["code"] == 2 and found["pre"] == 1 and found["li"] == 2, found
    assert found["bad"] == 0 and found["handlers"] == 0, found
    assert found["links"] == ["https://example.com/a_b_c"], found
    assert "<script>window.__pwned = 1</script>" in r["text"], r["text"]
    assert '<img src=y onerror="window.__pwned = 5">' in r["text"], r["text"]
    # the renderer on its own, its output put into the document: nothing runs
    driver.execute_async_script("""const done = arguments[arguments.length - 1];
        const box = document.createElement('div');
        for (const s of arguments[0]) box.innerHTML += window.kipp.render(s);
        document.body.append(box);
        setTimeout(done, 300);""", [HOSTILE, "<img src=x onerror=window.__pwned=6>",
                                    "**<svg/onload=window.__pwned=7>**",
                                    '[a](https://e.com/"onmouseover="window.__pwned=8)'])
    assert js(driver, "return window.__pwned") == 0
    # thinking off reaches the request; "<think>" text in content is split off too
    set_field(driver, "thinking", False)
    js(driver, "window.__events = arguments[0]", [delta(content="<think>inner"),
                                                  delta(content="</think>\n\nthe answer")])
    send(driver, "Again.")
    r = wait_reply_done(driver, "the second canned reply")
    req = js(driver, "return window.__sent[1]")
    assert req["chat_template_kwargs"] == {"enable_thinking": False}, req
    assert [m["role"] for m in req["messages"]] == ["system", "user", "assistant", "user"], req
    assert r["think"] == "inner" and r["text"] == "the answer", r


def test_api_key_asked_once_and_kept(driver, auth_server):
    from selenium.webdriver.common.by import By
    driver.get(auth_server.url + "/health")
    js(driver, "localStorage.clear()")
    driver.get(auth_server.url + "/")
    form_shown = lambda: js(driver, "return !document.getElementById('key-form').hidden")
    wait(driver, form_shown, "the API key field after /v1/models answered 401")
    key = driver.find_element(By.ID, "key-input")
    key.send_keys("wrong-key")
    driver.find_element(By.ID, "key-save").click()
    wait(driver, lambda: form_shown() and "refused" in js(
        driver, "return document.getElementById('key-label').textContent"), "the wrong key refused")
    key.send_keys(API_KEY)
    driver.find_element(By.ID, "key-save").click()
    wait(driver, lambda: js(driver, "return document.getElementById('model').textContent") == MODEL_NAME,
         "the model name with the right key")
    assert not form_shown()
    assert js(driver, "return localStorage.getItem('kipp.apiKey')") == API_KEY
    set_field(driver, "max-tokens", "3")
    send(driver, "hi")
    r = wait_reply_done(driver, "the reply with the key")
    assert r["note"] == "Stopped at the token limit.", r
    # kept across a reload: no question
    driver.get(auth_server.url + "/")
    wait(driver, lambda: js(driver, "return document.getElementById('model').textContent") == MODEL_NAME,
         "the model name after a reload")
    assert not form_shown()
    # forgotten: the next chat request gets 401, the page asks, then sends it
    js(driver, "document.getElementById('forget-key').click()")
    send(driver, "hello")
    wait(driver, form_shown, "the API key field after the chat request answered 401")
    driver.find_element(By.ID, "key-input").send_keys(API_KEY)
    driver.find_element(By.ID, "key-save").click()
    wait(driver, lambda: last_reply(driver)["note"] == "Stopped at the token limit.", "the retried reply")
    assert not form_shown()
