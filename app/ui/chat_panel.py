"""Chat with the running engine: the model's chat template (``/v1/chat/completions``), streamed.

Your turns and the model's are drawn apart (their own colour and name), each reply with its length,
its speed and how much of the prompt the engine reused from its cache. Fork sends the chat and the
new message once with ``n_cmpl = K``: K replies side by side from one shared prompt, and the proof
from ``/metrics`` that it was evaluated once; "Continue with this" carries one reply into the chat.

The HTTP runs in a ``TaskThread`` (app.sessions.chat is plain Python); streamed pieces are queued
and shown ten times a second. Bound to the window state (``bind``), it works once the engine is
ready; when the engine stops, the chat stays on screen (a new engine evaluates it again) — until
another model opens: a chat with one model is not continued on another.
"""

from __future__ import annotations

import html

from app.sessions.chat import ChatOutcome, Message, Reply, StopSwitch, chat
from app.sessions.client import EngineClient
from app.sessions.fork import Sampling
from app.text import escape, printable_text
from app.ui.qt import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QSplitter,
    Qt,
    QTextBrowser,
    QTimer,
    QVBoxLayout,
    QWidget,
    Signal,
    prompt_line,
)
from app.ui.window_state import WindowState
from app.ui.workers import StreamBatcher, TaskPool

#: A reply's length unless the user sets another (the "Max tokens" box).
MAX_TOKENS = 256
#: The most replies a fork shows side by side (and never more than the engine has slots).
MAX_FORK = 8
#: Your turns and the model's: background, name colour.
USER_COLOURS = ("#dbe8ff", "#1f4e9c")
MODEL_COLOURS = ("#eeeeee", "#2e6b30")
ERROR = "#d62728"
#: The lines of text the chat and each fork reply show at least while a fork is on screen.
FORK_LINES = 5
ANOTHER_MODEL = "Another model is open: the chat with the one before was cleared. Launch the engine to chat with this one."


def shown(text: str) -> str:
    """Text from the model (or typed) as safe HTML: escaped as the CLI prints a reply
    (``app.text.printable_text``: a control character or a bidirectional override as its escape,
    ``\\x1b``), any line break one ``<br>``."""
    lines = printable_text(text.replace("\r\n", "\n").replace("\r", "\n")).split("\n")
    return "<br>".join(html.escape(line) for line in lines)


def lines_tall(view: QWidget, lines: int) -> int:
    """The height of ``lines`` lines of ``view``'s text, with its frame and margins."""
    return view.fontMetrics().lineSpacing() * lines + 12


def turn_html(role: str, text: str, stats: str = "") -> str:
    """One turn as a coloured block: "You" or "Model", its text, and the reply's numbers."""
    back, name = USER_COLOURS if role == "user" else MODEL_COLOURS
    who = "You" if role == "user" else "Model"
    foot = f"<br><span style='color:#555555; font-size:small'>{escape(stats)}</span>" if stats else ""
    return (f"<table width='100%' cellpadding='6' cellspacing='0' bgcolor='{back}' style='margin-bottom:6px'>"
            f"<tr><td><b style='color:{name}'>{who}</b><br>{shown(text)}{foot}</td></tr></table>")


#: Said when the engine is ready with a model that carries no chat template.
NO_TEMPLATE = ("This model carries no chat template: the engine formats the chat as ChatML (<|im_start|>…), "
               "which the model may not know, so its replies may repeat those tags or wander.")

class ForkColumn(QWidget):
    """One of a fork's replies: its text, its numbers, and the button that keeps it."""

    def __init__(self, index: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.index = index
        self.title = QLabel(f"<b>Reply {index + 1}</b>")
        self.text = QTextBrowser()
        self.text.setAccessibleName(f"Fork reply {index + 1}")
        # The reply's numbers under its box, one short line (all of them on hover): inside the box
        # they took four of its five lines in a column a third of the chat wide.
        self.stats = QLabel()
        self.stats.setTextFormat(Qt.TextFormat.PlainText)
        self.stats.setStyleSheet("color: #555555;")
        self.keep = QPushButton("Continue with this")
        self.keep.setToolTip("Carry this reply into the chat (the other replies are dropped)")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.title)
        lay.addWidget(self.text, 1)
        lay.addWidget(self.stats)
        lay.addWidget(self.keep)

    def show_reply(self, reply: Reply) -> None:
        self.text.setHtml(shown(reply.text))
        self.stats.setText(reply.short_stats())
        self.stats.setToolTip(reply.stats())
        bar = self.text.verticalScrollBar()
        bar.setValue(bar.maximum())


class ChatPanel(QWidget):
    replyDone = Signal(object)  # ChatOutcome
    forkShown = Signal(int)  # the replies side by side now (0: none)
    streamed = Signal()  # new text is on screen
    failed = Signal(str)

    def __init__(self, parent: QWidget | None = None, pool: TaskPool | None = None) -> None:
        super().__init__(parent)
        self.base_url = ""
        self.api_key: str | None = None
        self.n_slots = 1
        #: Generate every token asked for, past the model's end-of-generation token (llama-server
        #: ``ignore_eos``): off for a chat; a test sets it for a reply that cannot end by itself.
        self.ignore_eos = False
        #: What the running engine's chat template is, when that needs saying (NO_TEMPLATE), else "".
        self.template_note = ""
        self.transcript: list[tuple[Message, str]] = []  # each message and, for a reply, its numbers
        self.asking: Message | None = None  # the message of the request running now
        self.live: list[Reply] = []  # its replies as they stream
        self.fork_replies: list[Reply] = []  # the last fork's, until one is kept
        self.fork_message: Message | None = None
        self._switch: StopSwitch | None = None
        self.pool = pool if pool is not None else TaskPool(self)

        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.RichText)
        self.status.setObjectName("chatStatus")
        self.view = QTextBrowser()
        self.view.setAccessibleName("Chat")
        self.view.setOpenLinks(False)
        # Two lines at least, so a short window (1024×700) keeps the plan its share; a taller one gives
        # more. While a fork shows, FORK_LINES each for the chat and the replies (``_show_forks``).
        self.view.setMinimumHeight(lines_tall(self.view, 2))
        self.forks = QWidget()
        self.fork_row = QHBoxLayout(self.forks)
        self.fork_row.setContentsMargins(0, 0, 0, 0)
        self.columns: list[ForkColumn] = []
        self.forks.setVisible(False)
        split = QSplitter(Qt.Orientation.Vertical)  # the chat over a fork's replies
        split.addWidget(self.view)
        split.addWidget(self.forks)
        split.setChildrenCollapsible(False)
        split.setStretchFactor(0, 1)  # room the window gives a fork (PlanSplit.set_forking): shared by both
        split.setStretchFactor(1, 1)
        self.split = split
        self.message = prompt_line()
        self.message.setPlaceholderText("Message to the model (Enter sends)")
        self.message.setAccessibleName("Chat message")
        self.message.returnPressed.connect(self.send)
        self.send_button = QPushButton("Sen&d")
        self.send_button.clicked.connect(self.send)
        self.fork_button = QPushButton("Fork")  # every Alt letter of it (and of Stop, New chat) is taken
        self.fork_button.setToolTip("Send the chat and this message once and get K replies side by side: "
                                    "the prompt is evaluated once and shared by K slots")
        self.fork_button.clicked.connect(self.fork)
        self.k = QSpinBox()
        self.k.setRange(2, 2)
        self.k.setPrefix("into ")
        self.k.setAccessibleName("Number of replies")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 32768)
        self.max_tokens.setValue(MAX_TOKENS)
        self.max_tokens.setPrefix("max ")
        self.max_tokens.setSuffix(" tokens")
        self.max_tokens.setAccessibleName("Maximum reply length in tokens")
        self.max_tokens.setToolTip("The longest a reply may be (llama-server's n_predict)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.new_button = QPushButton("New chat")
        self.new_button.clicked.connect(self.new_chat)
        # Three short rows, not one long one: beside the log the chat keeps the window under 800 px
        # wide. The fork's proof is said beside Fork.
        row1 = QHBoxLayout()
        row1.addWidget(self.message, 1)
        row1.addWidget(self.send_button)
        row1.addWidget(self.stop_button)
        row2 = QHBoxLayout()
        row2.addWidget(self.max_tokens)
        row2.addStretch(1)
        row2.addWidget(self.new_button)
        row3 = QHBoxLayout()
        row3.addWidget(self.fork_button, 0, Qt.AlignmentFlag.AlignTop)
        row3.addWidget(self.k, 0, Qt.AlignmentFlag.AlignTop)
        row3.addWidget(self.status, 1)
        lay = QVBoxLayout(self)
        lay.addWidget(split, 1)
        lay.addLayout(row1)
        lay.addLayout(row2)
        lay.addLayout(row3)
        self._stream = StreamBatcher(self)  # a reply's pieces, ten times a second
        self._stream.flushed.connect(self._show_pieces)
        self.set_engine("", None)

    def bind(self, state: WindowState) -> None:
        """The running engine: from when it answers until it is gone."""

        def ready(url: str) -> None:
            engine, running = state.running_engine, state.running
            self.template_note = "" if state.model is None or state.model.shape.has_chat_template else NO_TEMPLATE
            self.set_engine(url, engine.api_key if engine is not None else None,
                            running.launch.n_parallel if running is not None else 1)

        def another_model(_model: object) -> None:
            if state.running_engine is None and (self.transcript or self.fork_message is not None):
                self.new_chat()  # that chat was with the model before: nothing to continue on this one
                self._say(ANOTHER_MODEL)

        state.engineReady.connect(ready)
        state.runningChanged.connect(lambda plan: self.set_engine("", None) if plan is None else None)
        state.modelChanged.connect(another_model)

    def set_engine(self, base_url: str, api_key: str | None, n_slots: int = 1) -> None:
        """The running engine ("" when none): the chat works only while one is up; its text stays."""
        gone = bool(self.base_url) and not base_url
        new_engine = bool(base_url) and base_url != self.base_url
        self.base_url, self.api_key, self.n_slots = base_url, api_key, n_slots
        if gone and self._switch is not None:
            self._switch.stop()
        self.k.setMaximum(max(2, min(MAX_FORK, n_slots)))
        self._enable()
        if gone:
            self._say("Engine stopped: the chat is kept. Launch again to continue it "
                      "(the new engine evaluates it again)." if self.transcript else "Engine stopped.")
        elif not base_url:
            self._say("Launch the engine to chat with the model.")
        elif new_engine:
            fork = (f"; Fork gives up to {self.k.maximum()} replies from one shared prompt" if n_slots >= 2 else
                    f"; to fork, launch with Parallel sessions 2 or more (this engine has {n_slots} slot)")
            self._say(f"Engine ready: type a message and Send{fork}." + (f" {self.template_note}" if self.template_note else ""))

    def _enable(self) -> None:
        up, busy = bool(self.base_url), self.asking is not None
        self.message.setEnabled(up)
        self.send_button.setEnabled(up and not busy)
        for w in (self.fork_button, self.k):
            w.setEnabled(up and not busy and self.n_slots >= 2)
        self.stop_button.setEnabled(busy)
        self.new_button.setEnabled(not busy)
        for col in self.columns:
            col.keep.setEnabled(not busy)

    # ---- actions -------------------------------------------------------------------------------
    def send(self) -> None:
        """The chat and the typed message to the model; its reply streams into the chat."""
        self._ask(1)

    def fork(self) -> None:
        """The chat and the typed message once, K replies from the one shared prompt."""
        self._ask(self.k.value())

    def stop(self) -> None:
        """Stop the reply being generated (the text so far is kept)."""
        if self._switch is not None:
            self._switch.stop()
            self._say("Stopping…")

    def new_chat(self) -> None:
        self.transcript, self.fork_replies, self.fork_message = [], [], None
        self._show_forks(0)
        self._render()
        self._say("New chat." if self.base_url else "Launch the engine to chat with the model.")

    def keep_reply(self, index: int) -> None:
        """Carry fork reply ``index`` into the chat, after the message it answered."""
        if self.fork_message is None or not 0 <= index < len(self.fork_replies):
            return
        reply = self.fork_replies[index]
        self.transcript += [(self.fork_message, ""), (Message("assistant", reply.text), reply.stats())]
        self.fork_replies, self.fork_message = [], None
        self._show_forks(0)
        self._render()
        self._say(f"Reply {index + 1} is now part of the chat.")

    def _ask(self, k: int) -> None:
        text = self.message.text()
        if not self.base_url or self.asking is not None:
            return
        if not text.strip():
            self._say("Type a message first: Send gets the model's reply to it, Fork gets K replies.")
            self.message.setFocus()
            return
        self.asking = Message("user", text)
        messages = [m for m, _ in self.transcript] + [self.asking]
        self.live = [Reply(i) for i in range(k)]
        self._stream.clear()
        self.message.clear()
        if k > 1:
            self.fork_replies, self.fork_message = self.live, self.asking
            self._show_forks(k)
        sampling = Sampling(self.max_tokens.value(), ignore_eos=self.ignore_eos)
        client, switch = EngineClient(self.base_url, self.api_key), StopSwitch()
        self._switch = switch
        self._enable()
        self._render()
        self._say(f"Forking into {k} replies…" if k > 1 else "The model is replying…")
        self.pool.run(lambda _c: chat(client, messages, sampling, k=k, on_piece=self._piece, stop=switch),
                      self._done, self._failed, owner=self)

    # ---- results -------------------------------------------------------------------------------
    def _piece(self, index: int, piece: str) -> None:  # the worker thread
        self._stream.add(index, piece)

    def _show_pieces(self, pieces: object) -> None:
        assert isinstance(pieces, dict)
        for i, parts in pieces.items():
            if isinstance(i, int) and 0 <= i < len(self.live):
                self.live[i].text += "".join(parts)
        self._render()
        self.streamed.emit()

    def _done(self, result: object) -> None:
        if not isinstance(result, ChatOutcome):
            return
        self._stream.clear()
        asked, k = self.asking, len(result.replies)
        if k > 1 and not any(r.text for r in result.replies):  # nothing to choose from
            self._show_forks(0)
            self.fork_replies, self.fork_message = [], None
            self._give_back(asked)
        elif k > 1:
            self.fork_replies = result.replies
        elif asked is not None and (result.replies[0].text or result.replies[0].finished):
            reply = result.replies[0]
            self.transcript += [(asked, ""), (Message("assistant", reply.text), reply.stats())]
        else:
            self._give_back(asked)
        self.asking, self.live, self._switch = None, [], None
        self._enable()
        self._render()
        # the proof's verdict beside Fork, its counts on hover (the whole of it wrapped past the window's foot)
        parts = [escape(result.proof.headline)] if result.proof is not None else []
        self.status.setToolTip(str(result.proof) if result.proof is not None else "")
        if result.stopped:
            parts.append("Stopped: the text so far is kept.")
        if k > 1 and result.ok:
            parts.append("Continue with one to carry it into the chat.")
        if result.error:
            parts.append(f"<span style='color:{ERROR}'>{escape(result.error)}</span>")
        self.status.setText("<br>".join(parts) or escape(result.replies[0].stats()))
        self.replyDone.emit(result)

    def _failed(self, message: str) -> None:
        if self.asking is not None and len(self.live) > 1:
            self._show_forks(0)
            self.fork_replies, self.fork_message = [], None
        self._give_back(self.asking)
        self.asking, self.live, self._switch = None, [], None
        self._enable()
        self._render()
        self.status.setText(f"<span style='color:{ERROR}'>{escape(message)}</span>")
        self.status.setToolTip("")
        self.failed.emit(message)

    def _give_back(self, asked: Message | None) -> None:
        """A message the model never answered goes back into the box, to send again or change
        (unless something new was typed there meanwhile)."""
        if asked is not None and not self.message.text():
            self.message.setText(asked.content)

    # ---- drawing -------------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        self.status.setText(escape(text))
        self.status.setToolTip("")

    def _render(self) -> None:
        """The chat (and a running single reply) in the view; a fork's replies in their columns."""
        blocks = [turn_html(m.role, m.content, stats) for m, stats in self.transcript]
        if self.asking is not None:
            blocks.append(turn_html("user", self.asking.content, f"forked into {len(self.live)}"
                                    if len(self.live) > 1 else ""))
            if len(self.live) == 1:
                blocks.append(turn_html("assistant", self.live[0].text or "…"))
        elif self.fork_message is not None:
            blocks.append(turn_html("user", self.fork_message.content,
                                    f"forked into {len(self.fork_replies)}: the replies are below"))
        self.view.setHtml("".join(blocks))
        bar = self.view.verticalScrollBar()
        bar.setValue(bar.maximum())
        for col, reply in zip(self.columns, self.fork_replies, strict=False):
            col.show_reply(reply)

    def _show_forks(self, k: int) -> None:
        for col in self.columns:
            self.fork_row.removeWidget(col)
            col.deleteLater()
        self.columns = [ForkColumn(i) for i in range(k)]
        for col in self.columns:
            col.keep.clicked.connect(lambda _checked=False, i=col.index: self.keep_reply(i))
            self.fork_row.addWidget(col, 1)
        self.forks.setVisible(k > 0)
        # At 1400×900 a fork left the replies two lines and the chat one: each gets FORK_LINES at least
        # (the window's lower pane grows for them, the plan above gives way).
        self.view.setMinimumHeight(lines_tall(self.view, FORK_LINES if k else 2))
        for col in self.columns:
            col.text.setMinimumHeight(lines_tall(col.text, FORK_LINES))
        self.forkShown.emit(k)  # the window gives the sessions pane more of its height meanwhile
        if k:  # half for the replies, half for the chat above (its last turns stay in view)
            self._halve()
            QTimer.singleShot(0, self._halve)  # again once the pane has its new height

    def _halve(self) -> None:
        """The chat and each reply's box equally tall (the replies' titles and buttons come on top)."""
        if self.columns:
            total = sum(self.split.sizes()) or self.split.height()
            chrome = max(0, self.forks.minimumSizeHint().height() - self.columns[0].text.minimumHeight())
            view = (total - chrome) // 2
            self.split.setSizes([view, total - view])

    def shutdown(self) -> None:
        if self._switch is not None:
            self._switch.stop()
        self.pool.wait(self)
        self._stream.stop()
