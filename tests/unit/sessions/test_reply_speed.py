"""The window's speed row in words (app/sessions/reply_speed.py): a reply's own timings beside the
plan's prediction, /metrics' averages or why there are none, a placement without a prediction, a
prompt that came whole from the cache. Real plans of the tiny test model; the engine's answers are
the recorded /metrics (tests/unit/sessions/data) and a reply's timings as the chat parses them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.engine.speed_check import Timings, check_speed
from app.planner.devices import HostMemory, Inventory
from app.planner.gguf.model import read_shape
from app.planner.plan_types import Plan
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan
from app.planner.units import GiB
from app.planner.words import tokens_per_s
from app.sessions.chat import Reply
from app.sessions.metrics import Counters
from app.sessions.reply_speed import NOT_PREDICTED, ReplySpeed, predicted_line, reply_speed, timings_of
from tests.fixtures import gguf_factory, shapes

DATA = Path(__file__).parent / "data"
HOST = Inventory((), HostMemory(16 * GiB, 12 * GiB), reason="test: no GPU")


def _plan() -> Plan:
    return make_plan(read_shape(gguf_factory.ensure(shapes.TINY_CHAT)), HOST, LaunchSettings(n_ctx=4096))


def test_a_reply_measured_beside_the_prediction_with_metrics() -> None:
    plan = _plan()
    assert plan.speed is not None
    reply = Reply(0, predicted=12, tokens_per_second=850.4, prompt_evaluated=30, prompt_per_second=4321.0)
    timings = timings_of(reply)
    assert timings == Timings(30, 4321.0, 12, 850.4)
    metrics = Counters.from_text((DATA / "metrics_after_fork.txt").read_text())
    check = check_speed(plan, timings)
    assert check is not None
    text = ReplySpeed(timings, check, metrics).text()
    assert text.startswith("Speed of the last reply (predicted at its fill of the context): decode 850 tok/s measured "
                           "(12 tokens), ")
    assert "prefill 4,321 tok/s measured (30 prompt tokens)" in text
    assert "/metrics since its last read: decode 878, prefill 34,574 tok/s" in text  # (34574.5, rounded half to even)
    assert predicted_line(plan).startswith("Speed predicted: decode ")


def test_no_prediction_no_metrics_and_a_cached_prompt_are_said() -> None:
    plan = replace(_plan(), speed=None)  # the window engine's plan predicts no speed
    assert predicted_line(plan) == f"Speed {NOT_PREDICTED}"
    timings = Timings(0, 0.0, 8, 20.0)  # the whole prompt from the cache
    text = ReplySpeed(timings, check_speed(plan, timings), None, "/metrics: off (the engine runs without --metrics)").text()
    assert "prefill: the whole prompt came from the cache" in text and NOT_PREDICTED in text
    assert text.endswith("/metrics: off (the engine runs without --metrics)")
    assert timings_of(Reply(0)) is None  # nothing generated: nothing to measure


def test_an_engine_that_is_gone_is_said_not_raised() -> None:
    plan = _plan()
    timings = Timings(10, 100.0, 5, 10.0)
    result = reply_speed(plan, timings, "http://127.0.0.1:9", None, timeout=2.0)  # nothing listens on port 9
    assert result.metrics is None and result.metrics_note.startswith("/metrics: not read (")
    assert result.check is not None and result.measured == timings


def test_the_window_s_one_line_says_measured_beside_predicted_and_what_was_learned() -> None:
    plan = _plan()
    timings = Timings(300, 100_000.0, 12, 850.4)  # (more than half a ubatch of 512: the rate is compared)
    check = check_speed(plan, timings)
    assert check is not None and check.decode_ratio is not None and check.prefill_ratio is not None
    reply = ReplySpeed(timings, check, None, learned=True)
    assert reply.short() == (f"Last reply: decode 850 tok/s, {tokens_per_s(check.decode_predicted)} predicted at its "
                             f"fill; prefill 100,000, {tokens_per_s(check.prefill_predicted)} predicted")
    # what was learned, the token counts: in the full text (the row's tooltip)
    assert f"(decode ×{check.decode_ratio:.2g}, prefill ×{check.prefill_ratio:.2g})" in reply.text()
    cached = ReplySpeed(Timings(0, 0.0, 8, 20.0), None, None).short()
    assert cached == f"Last reply: decode 20 tok/s; prefill from the cache — {NOT_PREDICTED}"


def test_a_ratio_learned_over_a_prediction_an_earlier_launch_scaled_says_so() -> None:
    """Walkthrough: the row read "decode 7,682 tok/s, 8,742 predicted" and then "scale their predictions
    by it (decode ×0.68)", where 7,682 ÷ 8,742 is 0.88: the prediction already carried serve's ×0.78."""
    plan = _plan()
    timings = Timings(30, 4321.0, 12, 850.4)
    unscaled_check = check_speed(plan, timings)
    assert unscaled_check is not None
    check = replace(unscaled_check, decode_scale=0.78)
    assert check.decode_ratio is not None
    text = ReplySpeed(timings, check, None, learned=True).text()
    assert (f"(decode ×{check.decode_ratio:.2g}: measured ÷ the speed model's own figure; this reply's prediction "
            "already carried the earlier launches' decode ×0.78)") in text
    unscaled = ReplySpeed(timings, unscaled_check, None, learned=True).text()
    assert "already carried" not in unscaled


def test_a_chat_turn_s_few_new_tokens_are_not_compared_nor_learned() -> None:
    """A chat's next turn evaluates only its new tokens: 89 of them measured 466 tok/s where the model,
    which prices whole ubatches (their graph, splits and weights read once), said 127k, and the window
    learned prefill ×0.0037 for every later plan of the model. Half a ubatch or more is compared."""
    plan = _plan()
    short = check_speed(plan, Timings(89, 466.0, 24, 3072.0))
    assert short is not None and short.prefill_ratio is None and short.decode_ratio is not None
    assert "prefill 466 tok/s measured, not compared (a prompt under 256 tokens: too few" in short.line()
    text = ReplySpeed(short.measured, short, None, learned=True).text()
    assert "prefill 466 tok/s measured (89 prompt tokens), not compared" in text
    assert "(decode ×" in text and "prefill ×" not in text
    assert ReplySpeed(short.measured, short, None, learned=True).short().endswith(
        "; prefill 466 (too short a prompt to compare)")
    long = check_speed(plan, Timings(256, 100_000.0, 24, 3072.0))
    assert long is not None and long.prefill_ratio is not None


def test_a_prompt_shorter_than_a_large_ubatch_is_compared_as_the_one_ubatch_it_ran_as() -> None:
    """``serve``'s check prompt (a few hundred tokens) on a launch with ``-ub 2048`` was never compared
    (half a ubatch is 1,024), and one of 1,024–2,047 tokens was compared with a rate that spreads a
    ubatch's fixed costs over 2,048 tokens: a ratio biased low, learned. Both now meet the prediction
    for the ubatch the prompt really ran as."""
    plan = make_plan(read_shape(gguf_factory.ensure(shapes.TINY_CHAT)), HOST, LaunchSettings(n_ctx=4096, n_ubatch=2048,
                                                                                            n_batch=2048))
    assert plan.speed is not None and plan.kv is not None and plan.launch.effective_n_ubatch == 2048
    check = check_speed(plan, Timings(400, 50_000.0, 12, 850.4))
    assert check is not None and check.prefill_compared and check.prefill_ratio is not None
    at = plan.speed.between((400 + 12) / plan.kv.n_ctx_seq)
    assert check.prefill_predicted == at.prefill_for(400) < at.prefill  # (its ubatch's fixed cost over 400 tokens)
    assert check_speed(plan, Timings(255, 50_000.0, 12, 850.4)).prefill_ratio is None  # type: ignore[union-attr]


def test_a_later_turn_is_predicted_at_the_cells_it_decoded_over_cached_prefix_included() -> None:
    """A chat's tenth turn evaluates its 20 new tokens but decodes over the whole conversation: its
    prediction is at that fill, not at a near-empty context's."""
    plan = _plan()
    assert plan.speed is not None and plan.kv is not None
    reply = Reply(0, predicted=12, tokens_per_second=50.0, prompt_evaluated=20, prompt_per_second=900.0,
                  prompt_cached=3000)
    timings = timings_of(reply)
    assert timings is not None and timings.cache_n == 3000
    check = check_speed(plan, timings)
    assert check is not None
    assert check.decode_predicted == plan.speed.between((3000 + 20 + 12) / plan.kv.n_ctx_seq).decode
    assert check.decode_predicted < check_speed(plan, replace(timings, cache_n=0)).decode_predicted  # type: ignore[union-attr]


def test_a_ratio_too_far_off_to_be_the_machine_is_neither_shown_as_learned_nor_kept() -> None:
    plan = _plan()
    check = check_speed(plan, Timings(400, 1.0, 12, 850.4))  # prefill 1 tok/s: a stalled machine, not a model
    assert check is not None and check.prefill_ratio is None and check.decode_ratio is not None
    assert "prefill ×" not in ReplySpeed(check.measured, check, None, learned=True).text()


def test_a_side_measured_too_far_off_is_said_not_learned_and_why() -> None:
    """Timed under two busy loops on 2 cores, serve's check decoded 6.2 tok/s where about 919 were
    predicted: the calibration keeps nothing of it, and serve says which side and why."""
    plan = _plan()
    first = check_speed(plan, Timings(1760, 1.0, 32, 6.2))
    assert first is not None  # (prefill measured at 0.3 of its prediction, as the busy run's was)
    check = check_speed(plan, Timings(1760, 0.3 * first.prefill_predicted, 32, 6.2))
    assert check is not None and check.decode_ratio is None and check.prefill_ratio is not None
    ratio = check.decode_measured_ratio
    assert ratio is not None and ratio < 0.05
    said = check.not_learned("load 2.6 on 2 cores")
    assert said == (f"speed: not learned: measured ÷ predicted decode ×{ratio:.2g}, outside ×0.05–20: the machine "
                    "was busy (load 2.6 on 2 cores); the next launch measures again")
    assert "the timing or the prediction is off" in (check.not_learned() or "")
    fast = check_speed(plan, Timings(1760, 0.3 * first.prefill_predicted, 32, 150 * check.decode_predicted))
    assert fast is not None and "decode ×150," in (fast.not_learned() or "")  # digits, not 1.5e+02
    fine = check_speed(plan, Timings(1760, 0.3 * first.prefill_predicted, 32, check.decode_predicted))
    assert fine is not None and fine.not_learned("load 2.6 on 2 cores") is None


def test_serving_speed_says_once_that_an_engine_does_not_answer_its_metrics() -> None:
    from app.sessions.reply_speed import ServingSpeed

    now = [0.0]
    watch = ServingSpeed(_plan(), "http://127.0.0.1:9", None, every_s=10.0, clock=lambda: now[0])  # nothing on 9
    assert watch.poll() is None  # not yet time
    now[0] = 10.0
    said = watch.poll()
    assert said is not None and said.startswith("speed: /metrics not read (") and "not shown" in said
    now[0] = 20.0
    assert watch.poll() is None  # said once, not every 10 s
