#!/usr/bin/env python3
"""test_chat_tty.py — kipp-chat's line editing (libedit) driven through a real
pseudo-terminal (Python's pty module: stdin, stdout and stderr all on the pty's slave side,
so kipp-chat sees a terminal): Left-arrow editing (UTF-8 text too), Up and Home/End,
Ctrl-R across two runs through the history file, the continuation rules, /save and /load,
a bad /load, Ctrl-C and Ctrl-D, the history file's location ($XDG_STATE_HOME,
$HOME/.local/state, --history, --no-history) and unusable ones. What was typed is read back
from /save's JSON, never from the screen. HOME and XDG_STATE_HOME point into a temporary
directory. Called by tests/chat/test_chat.sh (BUILD selects the build tree); prints
"N passed, N failed" and exits non-zero on a failure."""
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time

BUILD = os.environ.get("BUILD", "build")
CHAT = os.path.join(BUILD, "kipp-chat")
MODEL = "models/kipp-tiny/kipp-tiny-bf16.gguf"
FLAGS = ["-t", "1", "--backend", "cpu", "-n", "4", "--greedy", "--no-think"]
TIMEOUT = 30.0  # seconds for any one expected output: generous for a loaded 2-core machine

LEFT, RIGHT, UP, HOME_KEY, END_KEY = "\x1b[D", "\x1b[C", "\x1b[A", "\x1b[H", "\x1b[F"
CTRL_R, CTRL_C, CTRL_D = "\x12", "\x03", "\x04"

passed = failed = 0


def check(cond, what, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}" + (f"\n  {detail}" if detail else ""))


class Session:
    """kipp-chat on a pty; out holds everything it wrote (stdout and stderr)."""

    def __init__(self, env, args=()):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
        self.proc = subprocess.Popen([CHAT, "-m", MODEL, *FLAGS, *args], stdin=slave,
                                     stdout=slave, stderr=slave, env=env,
                                     preexec_fn=Session._own_terminal)
        os.close(slave)
        self.fd, self.out, self.pos = master, b"", 0
        self.timeout = TIMEOUT  # cut to 2 s after the first miss, so a broken build fails fast

    @staticmethod
    def _own_terminal():
        """In the child: a new session whose controlling terminal is the pty, so that
        Ctrl-C typed on it is a SIGINT, as in a real terminal. The signals at their defaults and
        none blocked, whatever this test inherited (a background shell ignores SIGINT)."""
        for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    def _pump(self, wait):
        r, _, _ = select.select([self.fd], [], [], wait)
        if not r:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the program closed the terminal (it exited)
            return False
        self.out += data
        return bool(data)

    def expect(self, pattern, what):
        """Waits for pattern (a regex over bytes) after the last match; True when seen."""
        rx, end = re.compile(pattern.encode()), time.monotonic() + self.timeout
        while True:
            m = rx.search(self.out, self.pos)
            if m:
                self.pos = m.end()
                return True
            if time.monotonic() > end or not self._pump(0.1) and self.proc.poll() is not None:
                m = rx.search(self.out, self.pos)
                if m:
                    self.pos = m.end()
                    return True
                check(False, f"{what}: no /{pattern}/ within {self.timeout:.0f} s",
                      repr(self.out[self.pos:][-600:]))
                self.timeout = 2.0
                return False

    def type(self, keys):
        """Types keys once libedit reads: it switches the terminal out of canonical mode
        only when it reads the first key, after printing the prompt, and a key typed
        before that is seen by the line discipline (a Ctrl-D there is an EOF libedit never
        reads). The master side reports the terminal's modes."""
        end = time.monotonic() + self.timeout
        while termios.tcgetattr(self.fd)[3] & termios.ICANON and self.proc.poll() is None:
            if time.monotonic() > end:
                check(False, f"the terminal is still in canonical mode; cannot type {keys!r}")
                self.timeout = 2.0
                break
            self._pump(0.01)
        os.write(self.fd, keys.encode())

    def line(self, keys, done, what, prompt=r"> "):
        """Types keys and Enter, waits for done (a regex) and then for the next prompt, so
        that the terminal is known to be in canonical mode until the next read starts."""
        self.type(keys + "\r")
        return self.expect(done, what) and self.expect(prompt, f"{what}: the next prompt")

    def finish(self, keys=CTRL_D):
        self.type(keys)
        try:
            rc = self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait()
        while self._pump(0.05):
            pass
        os.close(self.fd)
        return rc


def users(path):
    try:
        msgs = json.load(open(path, encoding="utf-8"))["messages"]
    except (OSError, ValueError, KeyError) as e:
        return f"unreadable: {e}"
    return [m["content"] for m in msgs if m["role"] == "user"]


def read(path):
    try:
        return open(path, "rb").read()
    except OSError:
        return None


def main(tmp):
    if not os.access(CHAT, os.X_OK):
        check(False, f"{CHAT} is not built")
        return
    home, state = os.path.join(tmp, "home"), os.path.join(tmp, "state")
    os.makedirs(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "EDITRC", "LC_"))}
    env.update(HOME=home, XDG_STATE_HOME=state, TERM="xterm", LANG="C.UTF-8")
    hist = os.path.join(state, "kipp", "chat_history")
    j = lambda name: os.path.join(tmp, name)  # noqa: E731

    # --- run 1: editing, recall, continuation, /save, a bad /load ---
    s = Session(env)
    s.expect(r"loaded in [0-9.]+ ms; /help lists the commands", "start-up line")
    s.expect(r"> ", "first prompt")
    # "hllo", three Left arrows, insert "e": "hello"
    s.line("hllo" + LEFT * 3 + "e", r"turn 1: ", "Left-arrow edit")
    # Up recalls "hello"; Home inserts in front, End appends: "say hello!"
    s.type(UP)
    s.expect(r"hello", "Up shows the previous line")
    s.line(HOME_KEY + "say " + END_KEY + "!", r"turn 2: ", "Up + Home/End edit")
    # a line ending in '\' continues, with the continuation prompt
    s.type("two\\\r")
    s.expect(r"\.\.\. ", "continuation prompt after a trailing backslash")
    s.line("lines", r"turn 3: ", "continued message")
    # a """ block: verbatim, empty lines and a leading '/' kept
    for keys in ['"""', "a", "", "/b"]:
        s.type(keys + "\r")
        s.expect(r"\.\.\. ", f"block continuation prompt after {keys!r}")
    s.line('"""', r"turn 4: ", "block message")
    s.line(f"/save {j('s1.json')}", r"saved 8 messages to", "/save")
    with open(j("bad.json"), "w") as f:
        f.write('{"messages": [{"role": "user", "content": "x"},')
    s.line(f"/load {j('bad.json')}", r"the conversation is unchanged", "bad /load")
    s.line(f"/save {j('s2.json')}", r"saved 8 messages to", "/save after a bad /load")
    rc = s.finish(CTRL_D)
    check(rc == 0, f"Ctrl-D ends with 0, got {rc}")
    check(b"not valid JSON" in s.out and b"bad.json" in s.out,
          "bad /load names the file and the problem", repr(s.out[-400:]))
    want = ["hello", "say hello!", "two\nlines", "a\n\n/b"]
    got = users(j("s1.json"))
    check(got == want, "the typed messages (edits, continuation, block)", f"{got!r} != {want!r}")
    check(read(j("s2.json")) == read(j("s1.json")), "a bad /load kept the conversation")
    h = read(hist)
    check(h is not None and h.startswith(b"_HiStOrY_V2_\n") and b"say hello!" not in h
          and b"say\\040hello!" in h, "history file at $XDG_STATE_HOME/kipp/chat_history",
          repr(h))
    check(h is not None and (os.stat(hist).st_mode & 0o777) == 0o600, "history file is 0600")

    # --- run 2: Ctrl-R finds run 1's line through the history file; /load round-trips ---
    s = Session(env)
    s.expect(r"> ", "run 2 prompt")
    s.type(CTRL_R)
    s.expect(r"bck:", "Ctrl-R search prompt")
    s.type("say")
    s.expect(r"say hello!", "Ctrl-R finds the line from run 1")
    s.line("", r"turn 1: ", "Ctrl-R then Enter sends it")
    # UTF-8: Left moves over one character, not one byte
    s.line("na\u00efve \u4e16" + LEFT + "!", r"turn 2: ", "editing UTF-8 text")
    s.line(f"/save {j('r2.json')}", r"saved 4 messages to", "/save in run 2")
    s.line(f"/load {j('s1.json')}", r"loaded 8 messages from", "/load")
    s.line(f"/save {j('s3.json')}", r"saved 8 messages to", "/save after /load")
    rc = s.finish(CTRL_C)
    check(rc == 130, f"Ctrl-C at the prompt ends with 130, got {rc}")
    check(users(j("r2.json")) == ["say hello!", "na\u00efve !\u4e16"],
          "Ctrl-R result and the UTF-8 edit sent", repr(users(j("r2.json"))))
    check(read(j("s3.json")) == read(j("s1.json")), "/save, /load, /save round-trips byte for byte")

    # --- where the history goes: $HOME fallback, --history, --no-history, unwritable ---
    def typed_help(run_env, args, what):
        s = Session(run_env, args)
        s.expect(r"> ", f"{what}: prompt")
        s.line("/help", r"/save FILE", f"{what}: /help lists /save")
        rc = s.finish(CTRL_D)
        check(rc == 0, f"{what}: exit {rc}, want 0", repr(s.out[-400:]))
        return s.out

    before = read(hist)
    noxdg = {k: v for k, v in env.items() if k != "XDG_STATE_HOME"}
    typed_help(noxdg, [], "no XDG_STATE_HOME")
    fallback = read(os.path.join(home, ".local", "state", "kipp", "chat_history"))
    check(fallback is not None and b"/help" in fallback, "history under $HOME/.local/state")
    custom = j("deep/er/custom_history")
    typed_help(env, ["--history", custom], "--history")
    check(b"/help" in (read(custom) or b""), "--history FILE (missing directories made)")
    typed_help(env, ["--no-history"], "--no-history")
    check(read(hist) == before, "--history and --no-history leave the default file alone")
    with open(j("afile"), "w") as f:
        f.write("x")
    out = typed_help(env, ["--history", j("afile/h")], "unwritable history")
    check(b"warning: history file" in out and b"history is not saved" in out,
          "an unusable history file is a warning", repr(out[-400:]))
    with open(j("notes.txt"), "w") as f:
        f.write("my notes\n")
    out = typed_help(env, ["--history", j("notes.txt")], "not a history file")
    check(read(j("notes.txt")) == b"my notes\n" and b"not a history file" in out,
          "a file that is not a history file is left alone", repr(out[-400:]))


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kipp-chat-tty.") as d:
        main(d)
    print(f"pty: {passed} passed, {failed} failed ({time.monotonic() - t0:.1f} s)")
    sys.exit(1 if failed else 0)
