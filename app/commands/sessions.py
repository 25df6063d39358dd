"""``headroom sessions``: named sessions on a running engine that share one KV pool.

    headroom sessions --url http://127.0.0.1:8080 list     (or: headroom sessions list --url ...)
    headroom sessions --url ... fork "long document ..." --k 3 --names a,b,c
    headroom sessions --url ... continue b "and the second question?"
    headroom sessions --url ... metrics | smoke | send [NAME] PROMPT | save NAME | restore NAME

A PROMPT of ``@path`` is read from that file. Session text is kept (per URL) under the cache
directory and is saved even when a reply is cut off.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from app.commands.common import exit_status
from app.planner.words import plural
from app.sessions import fork as ops
from app.sessions.client import EngineClient, EngineError, EngineRejected
from app.sessions.smoke import TOO_FEW_SLOTS, run_smoke
from app.sessions.store import SessionStore, free_names
from app.text import printable, printable_text

EXIT_STATUS = exit_status("the action ran", "it ran but failed (the engine is not answering, refused the request "
                          "or cut a reply off)", "the request cannot be used (a bad URL, flag or prompt file, "
                          "an unknown session, a fork into more sessions than the engine has slots, a smoke test on an "
                          "engine with one slot)")


#: How long the engine may stay silent: before its answer (a long prompt is evaluated first) and
#: between two pieces of a streamed reply.
DEFAULT_TIMEOUT_S = 120.0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (try 120)")
    return value


def _engine_args(p: argparse.ArgumentParser, *, after: bool) -> None:
    """--url and --api-key, accepted before the action and after it. After it they default to
    SUPPRESS, so an action's parser does not overwrite what was given before the action."""
    p.add_argument("--url", default=argparse.SUPPRESS if after else None,
                   help="the engine, e.g. http://127.0.0.1:8080 (required)")
    p.add_argument("--api-key", default=argparse.SUPPRESS if after else os.environ.get("HEADROOM_API_KEY"),
                   help="the engine's --api-key (default: $HEADROOM_API_KEY); a key on a command line is "
                        "readable by every local user (ps): prefer --api-key-file or the variable")
    p.add_argument("--api-key-file", type=Path, default=argparse.SUPPRESS if after else None, metavar="FILE",
                   help="read the key from FILE (the one headroom serve keeps: ~/.config/headroom/api_key)")
    p.add_argument("--timeout", type=_seconds, default=argparse.SUPPRESS if after else DEFAULT_TIMEOUT_S,
                   metavar="SECONDS", help="give up when the engine sends no answer, or no next piece of a "
                                           f"reply, for this long (default {DEFAULT_TIMEOUT_S:g}: a long "
                                           "prompt is read before the first piece comes)")


#: The session ``send PROMPT`` and ``continue PROMPT`` use when no NAME is given.
DEFAULT_SESSION = "chat"


def register(sub: Any) -> None:
    p = sub.add_parser("sessions", allow_abbrev=False, help="fork, continue and inspect sessions on a running engine",
                       description="Fork, continue and inspect named sessions that share one KV pool.",
                       epilog=EXIT_STATUS)
    _engine_args(p, after=False)
    acts = p.add_subparsers(dest="action", metavar="ACTION", required=False, parser_class=_ActionParser)
    acts.add_parser("list", allow_abbrev=False, help="sessions and the engine's slots")
    acts.add_parser("metrics", allow_abbrev=False, help="prompt/generation counters and slot use")
    acts.add_parser("smoke", allow_abbrev=False, help="the shared-sequence smoke test (fork 2, continue both)")
    for name, helptext in (("send", f"start (or continue) session NAME (default {DEFAULT_SESSION})"),
                           ("continue", f"continue session NAME (default {DEFAULT_SESSION})")):
        a = acts.add_parser(name, allow_abbrev=False, help=helptext, usage="%(prog)s [options] [NAME] PROMPT")
        a.add_argument("words", nargs="*", metavar="[NAME] PROMPT",
                       help=f"the session (default {DEFAULT_SESSION}: `{name} \"Hello\"` is session {DEFAULT_SESSION}), "
                            "then what to say: text (quoted), or @FILE")
        a.add_argument("--raw", action="store_true",
                       help="a plain completion: the text as it is, without the model's chat template (a new "
                            "session; a model without a template always is one)")
        _sampling_args(a)
        a.set_defaults(usage=a.format_usage().strip())
    f = acts.add_parser("fork", allow_abbrev=False, help="one prompt, decoded once, into K sessions")
    f.add_argument("prompt", help="text, or @FILE")
    f.add_argument("--k", type=int, default=None, help="how many sessions (default: as many names)")
    f.add_argument("--names", default=None, help="comma-separated session names (default s1..sK)")
    _sampling_args(f)
    for name in ("save", "restore"):
        s = acts.add_parser(name, allow_abbrev=False, help=f"{name} session NAME's slot cache (engine needs --slot-save-path)")
        s.add_argument("name")
        if name == "restore":
            s.add_argument("--slot", type=int, default=None, help="restore into this slot")
    p.set_defaults(func=run, actions=[(a.dest, a.help or "") for a in acts._choices_actions])


class _ActionParser(argparse.ArgumentParser):
    """An action's parser: no abbreviations, the exit-status epilog, and --url/--api-key after it."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_STATUS)
        super().__init__(**kwargs)
        _engine_args(self, after=True)


def _n_predict(text: str) -> int:
    n = int(text)
    if n < -1:
        raise argparse.ArgumentTypeError(f"{n}: tokens to generate are -1 (until the model stops) or 0 and up")
    return n


def _temperature(text: str) -> float:
    t = float(text)
    if t < 0:
        raise argparse.ArgumentTypeError(f"{t}: the temperature is 0 (always the likeliest token) or more")
    return t


def _sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n-predict", type=_n_predict, default=128, metavar="N",
                   help="tokens to generate per reply (-1: until the model stops; default 128)")
    p.add_argument("--temperature", type=_temperature, default=0.8, metavar="T",
                   help="sampling temperature (0: always the likeliest token; default 0.8)")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="sampling seed, for replies you can get again (default: a new one each time)")


def _prompt(text: str) -> str:
    if not text.startswith("@"):
        return text
    try:
        return Path(text[1:]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"cannot read the prompt file {text[1:]}: {why}") from None


def _explain(exc: EngineError) -> str:
    """The error, plus what to do when the engine wants an API key this client did not send."""
    if isinstance(exc, EngineRejected) and exc.status == 401:
        from app.engine.apikey import key_path

        return (f"{exc} — give the key: --api-key-file {key_path()} (where headroom serve keeps it), or set "
                f"HEADROOM_API_KEY")
    return str(exc)


class _Printer:
    """One session's reply streams to stdout as it comes; several sessions' replies come interleaved,
    a token at a time, so they are held and each printed whole at the end (``_finish``), with a
    progress line on stderr while they arrive (on a terminal)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.tokens = [0] * len(names)

    def __call__(self, index: int, piece: str) -> None:
        if len(self.names) == 1:
            sys.stdout.write(printable_text(piece))
            sys.stdout.flush()
            return
        if 0 <= index < len(self.tokens):
            self.tokens[index] += 1
        if sys.stderr.isatty():
            counts = ", ".join(f"{n} {t}" for n, t in zip(self.names, self.tokens, strict=True))
            sys.stderr.write(f"\rreceiving: {counts} pieces")
            sys.stderr.flush()

    def done(self) -> None:
        if len(self.names) > 1 and sys.stderr.isatty():
            sys.stderr.write("\n")


def _check_url(url: str | None) -> str:
    """--url, given before or after the action; a bare word is not taken for a host name."""
    if not url:
        raise ValueError("--url is required (before or after the action), e.g. --url http://127.0.0.1:8080")
    if "://" not in url and ":" not in url:
        raise ValueError(f"--url {url}: not a valid http(s) URL (try http://127.0.0.1:8080)")
    return url


def _api_key(args: argparse.Namespace) -> str | None:
    """--api-key-file's key (its first line), else --api-key or $HEADROOM_API_KEY. ValueError for a file
    that cannot be read or holds no key."""
    path = getattr(args, "api_key_file", None)
    if path is None:
        return str(args.api_key) if args.api_key else None
    return key_from_file(Path(path))


def key_from_file(path: Path) -> str:
    """The key in ``path`` (its first line), as headroom serve keeps it; ValueError for a file that cannot
    be read or holds none."""
    try:
        key = path.read_text(errors="replace").strip().splitlines()
    except OSError as exc:
        raise ValueError(f"--api-key-file {path}: cannot read it: {exc.strerror or exc}") from None
    if not key or not key[0].strip():
        raise ValueError(f"--api-key-file {path}: holds no key")
    return key[0].strip()


def run(args: argparse.Namespace) -> int:
    if args.action is None:  # ``headroom sessions``: what it can do, not argparse's "required: ACTION"
        print("headroom sessions: say what to do with the sessions, one of:", file=sys.stderr)
        for name, words in args.actions:
            print(f"  {name:<9} {words}", file=sys.stderr)
        print("(headroom sessions ACTION --help for each; a chat in the terminal is headroom chat MODEL)",
              file=sys.stderr)
        return 2
    try:
        client = EngineClient(_check_url(args.url), _api_key(args), timeout=args.timeout)
        store = SessionStore(client.base_url)
    except ValueError as exc:
        print(f"headroom sessions: {exc}", file=sys.stderr)
        return 2
    try:
        return _ACTIONS[args.action](client, store, args)
    except (ValueError, OSError, ops.ForkTooLarge) as exc:  # a request that cannot be used as it is
        print(f"headroom sessions: {exc}", file=sys.stderr)
        return 2
    except EngineError as exc:
        print(f"headroom sessions: {printable(_explain(exc))}", file=sys.stderr)
        return 1


def _list(client: EngineClient, store: SessionStore, args: argparse.Namespace) -> int:
    error: EngineError | None = None
    try:
        slots = {s.id: s for s in client.slots()}
        print(f"engine at {client.base_url}: {plural(len(slots), 'slot')}")
    except EngineError as exc:  # the stored sessions are still worth listing
        slots, error = {}, exc
        print(f"engine at {client.base_url}: not answering")
    for s in store.sessions.values():
        held = slots.get(s.slot) if s.slot is not None else None
        where = _slot(s.slot) + (f" ({held.n_prompt_tokens} tokens cached)" if held else "")
        flag = "" if s.complete else "  [last reply cut off]"
        origin = f", {s.origin}" if s.origin else ""
        print(f"  {s.name:<16} {where:<32} {len(s.text):>7} chars, {plural(s.turns, 'turn')}{origin}{flag}")
    if not store.sessions and error is None:
        print(f"  ({_first_step(len(slots))})")
    if error is not None:
        print(f"headroom sessions: {printable(_explain(error))}", file=sys.stderr)
        return 1
    return 0


def _slot(slot: int | None) -> str:
    return f"slot {slot}" if slot is not None else "no slot"


def _first_step(n_slots: int) -> str:
    """What to do on an engine with no sessions yet: only what it can do (a fork needs 2 slots)."""
    if n_slots >= 2:
        return f"no sessions yet: headroom sessions ... fork PROMPT --k {min(n_slots, 3)}, or send [NAME] PROMPT"
    return ("no sessions yet: headroom sessions ... send [NAME] PROMPT; a fork needs an engine with -np 2 "
            "or more (headroom serve ... -np 2 -kvu)")


def _metrics(client: EngineClient, store: SessionStore, args: argparse.Namespace) -> int:
    c = client.metrics()
    print(f"prompt tokens decoded   {c.prompt_tokens}")
    print(f"prompt tokens reused    {c.prompt_tokens_cached}")
    print(f"tokens generated        {c.tokens_predicted}")
    print(f"decode calls            {c.decode_calls}")
    print(f"requests busy/deferred  {c.requests_processing}/{c.requests_deferred}")
    slots = client.slots()
    used = sum(s.n_prompt_tokens for s in slots)
    print(f"slots                   {len(slots)} ({sum(s.is_processing for s in slots)} busy), "
          f"{used} tokens held (shared cells counted per slot)")
    return 0


def _sampling(args: argparse.Namespace) -> ops.Sampling:
    return ops.Sampling(args.n_predict, args.temperature, args.seed)


def _finish(result: ops.TurnResult, printer: _Printer) -> int:
    """Report a turn (its sessions are stored already): several sessions' replies one after another,
    each whole; then per session its slot, its length and what the engine reused."""
    printer.done()
    if len(result.sessions) > 1:
        for s, comp in zip(result.sessions, result.completions, strict=True):
            print(f"[{s.name}] ({_slot(s.slot)})\n{printable_text(comp.text)}\n")  # the label, then the reply
    else:
        print()
    for s in result.sessions:
        reuse = result.reuse(s.name)
        print(f"session {s.name}: {_slot(s.slot)}, {len(s.text)} chars" + (f"; {reuse}" if reuse else ""))
    if result.proof is not None:
        print(result.proof)
    if result.error:
        print(f"headroom sessions: {printable(result.error)}", file=sys.stderr)
        return 1
    return 0


class UsageError(ValueError):
    """Arguments that cannot be read one way only: said with the action's usage line (exit 2)."""


def name_and_prompt(words: list[str], store: SessionStore, action: str) -> tuple[str, str]:
    """``[NAME] PROMPT`` read so that it cannot be misread: one word that names a session is a forgotten
    prompt, not a prompt; ``continue`` takes only a session there is; more than two words is an
    unquoted prompt. UsageError says which."""
    if not words:
        raise UsageError(f"{action}: what to say is missing (PROMPT)")
    if len(words) > 2:
        raise UsageError(f"{action}: {len(words)} words given, at most NAME and PROMPT: put the prompt in quotes")
    if len(words) == 1:
        (word,) = words
        if word in store.sessions:
            raise UsageError(f"{action}: what to say to session {word!r} is missing: {action} {word} PROMPT")
        name, prompt = DEFAULT_SESSION, word
    else:
        name, prompt = words
    if action == "continue" and name not in store.sessions:
        there = ", ".join(sorted(store.sessions)) or "none yet"
        raise UsageError(f"continue: there is no session {name!r} to continue (sessions: {there}); "
                         f"start one with: send {name} PROMPT")
    return name, prompt


def _send(client: EngineClient, store: SessionStore, args: argparse.Namespace) -> int:
    from app.sessions.chat import chat_turn, engine_template

    try:
        name, text = name_and_prompt(list(args.words), store, args.action)
    except UsageError as exc:
        print(f"{args.usage}\nheadroom sessions: {exc}", file=sys.stderr)
        return 2
    prompt = _prompt(text)
    session = store.get(name)
    printer = _Printer([name])
    if session is not None and session.is_chat and args.raw:
        raise ValueError(f"session {name!r} is a chat (the model's chat template): --raw starts a plain session "
                         "under another name")
    template = engine_template(client) if session is None and not args.raw else None
    chatting = session.is_chat if session is not None else template is not None and template.own is not False
    if template is not None and not chatting:
        print(f"plain completion: {template.words()} (a base model's? the text goes to it as it is)", file=sys.stderr)
    elif template is not None:
        print(f"chat: {template.words()}, applied by the engine (--raw for a plain completion)", file=sys.stderr)
    elif not chatting:
        print("plain completion" + (" (--raw)" if args.raw else "") + ": the text goes to the model as it is, "
              "without its chat template", file=sys.stderr)
    if chatting:
        result = chat_turn(client, store, name, prompt, _sampling(args), printer, new=args.action == "send")
    else:
        result = ops.turn(client, store, name, prompt, _sampling(args), printer, new=args.action == "send")
    return _finish(result, printer)


def _fork(client: EngineClient, store: SessionStore, args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.names.split(",")] if args.names else []
    k = args.k if args.k is not None else (len(names) or 2)
    if k < 2:
        raise ValueError(f"--k {k}: a fork makes at least 2 sessions (to start one, use: send [NAME] PROMPT)")
    if not names:  # the first free ones: a fork never replaces a session it was not told to
        names = free_names(store.sessions, k)
    if len(names) != k:
        raise ValueError(f"--k {k} but {len(names)} names given")
    if replaced := [n for n in names if n in store.sessions]:
        print(f"headroom sessions: replacing {', '.join(replaced)} (--names): the text they held is dropped",
              file=sys.stderr)
    printer = _Printer(names)
    result = ops.fork(client, _prompt(args.prompt), names, _sampling(args), printer)
    ops.keep(store, result)  # whatever arrived, before anything is printed
    return _finish(result, printer)


def _slot_file(client: EngineClient, store: SessionStore, args: argparse.Namespace) -> int:
    session = store.get(args.name)
    if session is None:
        raise ValueError(f"no session {args.name!r} for {client.base_url} (see: list)")
    if args.action == "save":
        info = ops.save(client, session)
        print(printable(f"saved {session.name}: {info.get('n_saved', '?')} tokens to {info.get('filename', '?')}"))
    else:
        info = ops.restore(client, session, args.slot)
        if args.slot is not None:
            session.slot = args.slot
            store.put(session)
        print(printable(f"restored {session.name}: {info.get('n_restored', '?')} tokens into slot "
                        f"{info.get('id_slot', '?')}"))
    return 0


def _smoke(client: EngineClient, store: SessionStore, args: argparse.Namespace) -> int:
    client.slots()  # an engine that never answered is not "an engine that exited during the smoke test"
    result = run_smoke(client.base_url, client.api_key, on_step=lambda s: print(f"  {s}"))
    print(result)
    if result.kind == TOO_FEW_SLOTS:  # a request this engine cannot take, as a fork into too many is
        return 2
    return 0 if result.ok else 1


_ACTIONS = {"list": _list, "metrics": _metrics, "send": _send, "continue": _send, "fork": _fork,
            "save": _slot_file, "restore": _slot_file, "smoke": _smoke}
