"""``headroom chat MODEL|URL``: a chat in the terminal, as ``ollama run`` and ``llama-cli`` have one.

Given a model (a GGUF, a llamafile, ``hf:owner/name``), it starts ``headroom serve`` on it — the same
plan, checks and engine a serve makes, with four slots in one pool so a reply can be forked — shows
its lines until the engine serves, and stops it (its whole process group) on exit; given a URL, it
talks to the engine there. Each message goes through the model's own chat template
(``/v1/chat/completions``, app/sessions/chat.py) and the reply streams as it comes. The conversation is
a session of Headroom's (``headroom sessions --url URL list`` sees it). At the prompt:

    /fork K     the last message again, answered K ways from one evaluation of the chat (sessions NAME.1…)
    /pick N     go on with reply N of the last fork
    /save [F]   the conversation as Markdown (default: headroom-chat-NAME-<time>.md here)
    /set max-tokens N, /set temperature T   how the next replies are sampled
    /help       these lines          /exit (or Ctrl-D)   leave

Ctrl-C stops a reply and keeps what came; at the prompt it says how to leave.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

from app.commands.common import exit_status, help_text, positive_int
from app.paths import cache_dir
from app.text import printable, printable_text

EXIT_STATUS = exit_status("the chat ended (/exit, Ctrl-D)", "the engine could not be started, or stopped answering",
                          "bad flags, or a model or URL that cannot be used")
HELP = ("/fork K  the last message answered K ways from one evaluation · /pick N  go on with reply N · "
        "/save [FILE]  the chat as Markdown · /set max-tokens N | temperature T · /exit  leave (or Ctrl-D) · "
        "Ctrl-C stops a reply")
#: Slots the engine is started with: a reply forks into up to this many.
SLOTS = 4
#: How long ``headroom serve`` may take to say it serves (its own load timeout is inside this).
START_TIMEOUT_S = 900.0


def register(sub: Any) -> None:
    p = sub.add_parser("chat", allow_abbrev=False, epilog=EXIT_STATUS,
                       help="chat with a model in the terminal (starts the engine for it, stops it on exit)",
                       description=help_text(__doc__ or "", skip=1),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="MODEL|URL",
                   help="a GGUF, a llamafile or hf:owner/name (Headroom serves it for the chat), or the URL of a "
                        "running engine (http://127.0.0.1:8080)")
    p.add_argument("-c", "--ctx", default=None, metavar="N", help="context of the engine Headroom starts (as serve)")
    p.add_argument("-np", "--parallel", type=positive_int, default=SLOTS, metavar="N",
                   help=f"slots of the engine Headroom starts, the most a reply forks into (default {SLOTS})")
    p.add_argument("--engine", type=Path, default=None, metavar="FILE", help="the engine to serve with (as serve)")
    p.add_argument("--session", default=None, metavar="NAME",
                   help="the session to chat in (default: a new one, chat, chat2, …; an existing one continues)")
    p.add_argument("--max-tokens", type=int, default=512, metavar="N", help="tokens a reply may have (default 512)")
    p.add_argument("--temperature", type=float, default=0.8, metavar="T", help="sampling temperature (default 0.8)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="sampling seed (default: a new one each reply)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="generate --max-tokens tokens even past the model's end (to time it)")
    p.add_argument("--api-key-file", type=Path, default=None, metavar="FILE",
                   help="the key of an engine at a URL that asks for one")
    p.set_defaults(func=run)


class Engine:
    """``headroom serve`` started for the chat: its lines until it serves, then to a log file."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     errors="replace", start_new_session=True, stdin=subprocess.DEVNULL)

    def wait_serving(self, say: Callable[[str], None], timeout: float = START_TIMEOUT_S) -> str | None:
        """The URL once serve says "serving at"; None when it ended first (its lines were said)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("serving at "):
                self._drain()
                return line.split()[2]
            say(line)
            if time.monotonic() > deadline:
                say(f"headroom chat: the engine did not serve within {timeout:.0f} s")
                return None
        return None

    def _drain(self) -> None:
        """The serve's later lines (its live speed lines) to the log, never over the chat."""
        out = self.proc.stdout
        assert out is not None

        def copy() -> None:
            try:
                with self.log_path.open("a", encoding="utf-8") as log:
                    for line in out:
                        log.write(line)
                        log.flush()
            except OSError:
                for _line in out:  # a log that cannot be written: still read, or serve blocks
                    pass

        threading.Thread(target=copy, name="chat-serve-log", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        """Ctrl-C to the serve's whole group (it stops its engine), then SIGKILL to what is left."""
        for sig, wait in ((signal.SIGINT, 60.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                return self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        return self.proc.poll()


def serve_argv(args: argparse.Namespace) -> list[str]:
    """The ``headroom serve`` the chat starts (``-m app``: in a bundle too, app/frozen.py)."""
    argv = [sys.executable, "-m", "app", "serve", args.target, "-np", str(args.parallel)]
    if args.parallel > 1:
        argv.append("-kvu")  # one pool: a fork shares its prompt's cells
    if args.ctx:
        argv += ["-c", str(args.ctx)]
    if args.engine is not None:
        argv += ["--engine", str(args.engine)]
    return argv


def run(args: argparse.Namespace) -> int:
    from app.sessions.client import EngineClient, EngineError

    engine: Engine | None = None
    url = args.target if args.target.startswith(("http://", "https://")) else None
    try:
        if url is None:
            log = _log_path()
            engine = Engine(serve_argv(args), log)
            print(f"starting the engine for {args.target} (headroom serve; its later lines go to {log})", flush=True)
            url = engine.wait_serving(lambda line: print(f"  {printable(line)}", flush=True))
            if url is None:
                code = engine.stop()
                print("headroom chat: the engine did not start (its lines are above)", file=sys.stderr)
                return 2 if code == 2 else 1
        key = _key(args.api_key_file)
        client = EngineClient(url, key, timeout=120.0)
        return Chat(client, args, engine).loop()
    except (ValueError, OSError) as exc:
        print(f"headroom chat: {exc}", file=sys.stderr)
        return 2
    except EngineError as exc:
        print(f"headroom chat: {printable(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nheadroom chat: stopped", file=sys.stderr)
        return 130
    finally:
        if engine is not None:
            engine.stop()
            print("engine stopped", flush=True)


def _log_path() -> Path:
    """Where the serve's later lines go: the cache's logs/, else (a read-only cache) the temporary folder."""
    import tempfile

    folder = cache_dir() / "logs"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.gettempdir())
    return folder / f"chat-serve-{datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}.log"


def _key(path: Path | None) -> str | None:
    from app.commands.sessions import key_from_file

    return key_from_file(path) if path is not None else os.environ.get("HEADROOM_API_KEY") or None


@contextmanager
def _ctrl_c_stops(stop: Callable[[], None]) -> Iterator[None]:
    """Ctrl-C stops the reply (``stop``), not the chat, while the block runs."""

    def handler(_signum: int, _frame: FrameType | None) -> None:
        stop()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class Chat:
    """The prompt loop over one session of the engine at ``client``."""

    def __init__(self, client: Any, args: argparse.Namespace, engine: Engine | None,
                 out: IO[str] | None = None) -> None:
        from app.sessions.fork import Sampling
        from app.sessions.store import SessionStore

        self.client, self.args, self.engine = client, args, engine
        self.out = out or sys.stdout
        self.store = SessionStore(client.base_url)
        self.name = args.session or next(n for n in ("chat", *(f"chat{i}" for i in range(2, 10_000)))
                                         if n not in self.store.sessions)
        self.sampling = Sampling(args.max_tokens, args.temperature, args.seed, ignore_eos=args.ignore_eos)
        self.forked: list[str] = []  # the replies of the last /fork

    def say(self, text: str = "", end: str = "\n") -> None:
        self.out.write(text + end)
        self.out.flush()

    def loop(self) -> int:
        from app.sessions.chat import engine_template

        try:
            import readline  # noqa: F401 (line editing and history for input())
        except ImportError:
            pass
        template = engine_template(self.client)
        session = self.store.get(self.name)
        if session is not None and not session.is_chat:
            raise ValueError(f"session {self.name!r} is a plain completion, not a chat: choose another --session")
        went_on = f", going on with its {session.turns} turns" if session is not None else ""
        self.say(f"chat with {self.client.base_url} in session {self.name}{went_on}: {template.words()}")
        if template.own is False and template.text:
            self.say("  (the model may not know that template: its replies may run on or stop at once)")
        self.say(HELP)
        while True:
            try:
                line = input(">>> ")
            except EOFError:
                self.say()
                return 0
            except KeyboardInterrupt:
                self.say("\n(to leave: /exit or Ctrl-D)")
                continue
            text = line.strip()
            if not text:
                continue
            if text.startswith("/"):
                done = self.command(text)
                if done is not None:
                    return done
                continue
            if self.reply(line) is False:
                return 1

    def command(self, text: str) -> int | None:
        """One ``/`` command; an exit status when the chat ends."""
        word, _, rest = text[1:].partition(" ")
        rest = rest.strip()
        if word in ("exit", "quit", "bye"):
            return 0
        if word == "help":
            self.say(HELP)
        elif word == "fork":
            self.fork(rest)
        elif word == "pick":
            self.pick(rest)
        elif word == "save":
            self.save(rest)
        elif word == "set":
            self.set(rest)
        else:
            self.say(f"/{printable(word)}: no such command; {HELP}")
        return None

    def _engine_gone(self) -> bool:
        return self.engine is not None and not self.engine.alive

    def reply(self, prompt: str) -> bool:
        """Stream the reply to ``prompt``; False when the engine is gone."""
        from app.sessions.chat import StopSwitch, chat_turn

        switch = StopSwitch()
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["result"] = chat_turn(self.client, self.store, self.name, prompt, self.sampling,
                                          lambda _i, piece: self.say(printable_text(piece), end=""), new=True,
                                          stop=switch)
            except Exception as exc:  # (said below, in the main thread)
                box["error"] = exc

        with _ctrl_c_stops(switch.stop):
            worker = threading.Thread(target=work, name="chat-reply", daemon=True)
            worker.start()
            while worker.is_alive():
                worker.join(0.1)
        self.say()
        if "error" in box:
            self.say(f"headroom chat: {printable(str(box['error']))}")
            return not self._engine_gone()
        result = box["result"]
        comp = result.completions[0]
        if switch.stopped:
            self.say(f"[stopped after {comp.pieces} pieces; what came is kept]")
        elif result.error:
            self.say(f"headroom chat: {printable(result.error)}")
            return not self._engine_gone()
        else:
            self.say(f"[{comp.tokens_predicted} tokens, {comp.tokens_per_second:.0f} tokens/s; "
                     f"{comp.prompt_cached:,} of {comp.prompt_tokens:,} prompt tokens reused from the cache]")
        self.forked = []
        return True

    def fork(self, rest: str) -> None:
        """The last message again, ``K`` replies from one evaluation (``n_cmpl``), kept as NAME.1…NAME.K."""
        from app.sessions.chat import Message, StopSwitch, chat
        from app.sessions.fork import ForkTooLarge
        from app.sessions.store import Session, transcript

        try:
            k = int(rest or "2")
        except ValueError:
            self.say(f"/fork {printable(rest)}: give how many replies, e.g. /fork 3")
            return
        session = self.store.get(self.name)
        history = list(session.messages or []) if session is not None else []
        last_user = max((i for i, m in enumerate(history) if m["role"] == "user"), default=None)
        if k < 2 or last_user is None:
            self.say("/fork K: K is 2 or more, after a first message" if k < 2 else "/fork: say something first")
            return
        prefix = history[:last_user + 1]
        switch = StopSwitch()
        counts = [0] * k
        box: dict[str, Any] = {}

        live = self.out.isatty()

        def piece(index: int, _text: str) -> None:  # (K replies come interleaved: each is shown whole after)
            if 0 <= index < k:
                counts[index] += 1
                if live:
                    self.say("\rreceiving: " + ", ".join(f"[{i + 1}] {n}" for i, n in enumerate(counts)), end="")

        def work() -> None:
            try:
                box["outcome"] = chat(self.client, [Message(m["role"], m["content"]) for m in prefix], self.sampling,
                                      k=k, on_piece=piece, stop=switch)
            except ForkTooLarge as exc:
                box["error"] = f"{exc} (headroom chat -np {k} starts an engine with {k} slots)"
            except Exception as exc:  # (said below)
                box["error"] = str(exc)

        with _ctrl_c_stops(switch.stop):
            worker = threading.Thread(target=work, name="chat-fork", daemon=True)
            worker.start()
            while worker.is_alive():
                worker.join(0.1)
        if live:
            self.say()
        if "error" in box:
            self.say(f"headroom chat: {printable(box['error'])}")
            return
        outcome = box["outcome"]
        names = [f"{self.name}.{i + 1}" for i in range(k)]
        branches = []
        for name, r in zip(names, outcome.replies, strict=True):
            self.say(f"[{name[len(self.name) + 1:]}] {printable_text(r.text)}")
            messages = [*prefix, {"role": "assistant", "content": r.text}]
            branches.append(Session(name, None, transcript(messages), len([m for m in messages if m["role"] == "user"]),
                                    r.finished, f"fork of {k} from {self.name}", messages))
        self.store.put(*branches)
        self.forked = names
        proof = f"{outcome.proof}; " if outcome.proof is not None else ""
        stopped = "stopped; " if outcome.stopped else ""
        self.say(f"[{stopped}{proof}kept as sessions {', '.join(names)}; /pick N goes on with reply N]")

    def pick(self, rest: str) -> None:
        """Go on with reply ``N`` of the last fork: it becomes this chat's last reply."""
        try:
            n = int(rest)
            chosen = self.store.get(self.forked[n - 1]) if 1 <= n <= len(self.forked) else None
        except ValueError:
            chosen = None
        if chosen is None:
            self.say(f"/pick N: N is one of 1…{len(self.forked)} after a /fork" if self.forked else
                     "/pick N: after a /fork")
            return
        session = self.store.get(self.name)
        if session is not None and chosen.messages is not None:
            session.messages = list(chosen.messages)
            from app.sessions.store import transcript

            session.text = transcript(session.messages)
            session.slot = None  # (the engine finds the chosen branch by its prefix)
            self.store.put(session)
            self.say(f"[going on with reply {n}]")

    def set(self, rest: str) -> None:
        """``/set max-tokens N`` or ``/set temperature T``: the next replies' sampling."""
        from dataclasses import replace

        what, _, value = rest.partition(" ")
        try:
            if what == "max-tokens" and int(value) >= 1:
                self.sampling = replace(self.sampling, n_predict=int(value))
            elif what == "temperature" and float(value) >= 0:
                self.sampling = replace(self.sampling, temperature=float(value))
            else:
                raise ValueError(what)
        except ValueError:
            self.say("/set max-tokens N (1 or more) or /set temperature T (0 or more)")
            return
        self.say(f"[{what} {value} from the next reply]")

    def save(self, rest: str) -> None:
        from app.files import atomic_write

        session = self.store.get(self.name)
        if session is None or not session.messages:
            self.say("/save: nothing said yet")
            return
        path = Path(rest).expanduser() if rest else Path(f"headroom-chat-{self.name}-{datetime.now():%Y%m%d-%H%M%S}.md")
        body = f"# Chat with {self.client.base_url} (session {self.name})\n\n" + "\n\n".join(
            f"**{m['role']}**: {m['content']}" for m in session.messages) + "\n"
        try:
            atomic_write(path, lambda f: f.write(body.encode()))
        except OSError as exc:
            self.say(f"/save: cannot write {path}: {exc.strerror or exc}")
            return
        self.say(f"[saved to {path.resolve()}]")
