"""Effects that survive a crash: the keyed desk, the journal, and recovery.

The property test is the chapter's claim in general form: for any short
script of lookups and refunds, crashed at any of the five points of its
first, second or third effectful call (a script with fewer runs to its end),
recovery leaves the same effect log, state and stop as the run that never
crashed, and Chapter 1's invariants hold for the recovered transcript.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from agentbook import (
    CRASH_POINTS,
    Crash,
    CrashAt,
    Journal,
    Limits,
    ScriptedModel,
    Stop,
    answer_message,
    check_run,
    make_environment,
    make_keyed_environment,
    lock_journal,
    recover_run,
    refund_gate,
    run_agent,
    run_durably,
)

from tests.desk_messages import TASK, entry, message, refund


def refund_script() -> list[dict[str, Any]]:
    return [message(entry("call_1", "lookup_order", {"order_id": "A-17"})),
            message(refund("call_2", 4999)), answer_message("Refunded.")]


# ------------------------------------------------------------------ the keyed desk


def test_a_key_is_applied_at_most_once_and_lookup_reports_it() -> None:
    tools, effects, lookup = make_keyed_environment()
    handler = tools["refund_order"].handler
    first = handler(order_id="A-17", amount_cents=10, idempotency_key="k")
    again = handler(order_id="A-17", amount_cents=10, idempotency_key="k")
    assert first == again == {"order_id": "A-17", "refunded_cents": 10}
    assert effects == [first] and lookup("other") is None
    assert lookup("k") == {"arguments": {"order_id": "A-17", "amount_cents": 10},
                           "receipt": first}


def test_without_a_key_the_keyed_desk_refunds_every_time() -> None:
    tools, effects, lookup = make_keyed_environment()
    tools["refund_order"].handler(order_id="A-17", amount_cents=10)
    tools["refund_order"].handler(order_id="A-17", amount_cents=10)
    assert len(effects) == 2


def test_a_key_reused_for_another_refund_is_refused_and_moves_nothing() -> None:
    tools, effects, _ = make_keyed_environment()
    tools["refund_order"].handler(order_id="A-17", amount_cents=10, idempotency_key="k")
    with pytest.raises(ValueError, match="used for another refund"):
        tools["refund_order"].handler(order_id="A-17", amount_cents=11, idempotency_key="k")
    assert effects == [{"order_id": "A-17", "refunded_cents": 10}]


def test_the_model_cannot_send_a_key_itself() -> None:
    tools, effects, _ = make_keyed_environment()
    sneaky = message(entry("c", "refund_order", {"order_id": "A-17", "amount_cents": 10,
                                                 "idempotency_key": "mine"}))
    result = run_agent(TASK, ScriptedModel(turns=[sneaky]), tools, refund_gate)
    assert result.state.observations[0].kind == "invalid" and effects == []


# ---------------------------------------------------------------------- the journal


def test_the_journal_reads_back_what_was_appended(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    assert journal.records() == []
    journal.append({"kind": "a", "n": 1})
    journal.append({"kind": "b", "text": "é\n"})
    assert journal.records() == [{"kind": "a", "n": 1, "seq": 1},
                                 {"kind": "b", "text": "é\n", "seq": 2}]
    assert len(journal.path.read_text(encoding="utf-8").splitlines()) == 2


def test_a_last_line_cut_short_is_ignored(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    journal.append({"kind": "a"})
    with journal.path.open("a", encoding="utf-8") as file:
        file.write('{"kind": "b", "te')
    assert journal.records() == [{"kind": "a", "seq": 1}]


def test_a_torn_last_line_is_cut_off_before_the_next_append(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    journal.append({"kind": "a"})
    with journal.path.open("a", encoding="utf-8") as file:
        file.write('{"kind": "outc')
    Journal(journal.path).append({"kind": "b"})  # a new process appends after the tear
    assert journal.path.read_text(encoding="utf-8").endswith('{"kind": "b", "seq": 2}\n')
    assert [r["kind"] for r in Journal(journal.path).records()] == ["a", "b"]


def test_a_record_out_of_sequence_is_refused(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    journal.append({"kind": "a"})
    journal.append({"kind": "b"})
    first, second, _ = journal.path.read_text(encoding="utf-8").split("\n")
    journal.path.write_text(f"{second}\n{first}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1: sequence number 2"):
        journal.records()


def test_two_writers_on_one_file_are_caught_by_the_sequence(tmp_path: Path) -> None:
    one, two = Journal(tmp_path / "j.jsonl"), Journal(tmp_path / "j.jsonl")
    one.append({"kind": "a"})
    two.append({"kind": "b"})
    one.append({"kind": "c"})  # it still believes it wrote the last record
    with pytest.raises(ValueError, match="line 3: sequence number 2"):
        one.records()


def test_a_journal_held_by_one_holder_is_refused_to_another(tmp_path: Path) -> None:
    tools, effects, lookup = make_keyed_environment()
    journal = Journal(tmp_path / "busy.jsonl")
    with pytest.raises(Crash):
        run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, journal,
                    crash=CrashAt("after_effect"))
    with lock_journal(Journal(journal.path)):
        with pytest.raises(ValueError, match="in use by another process"):
            recover_run(Journal(journal.path), ScriptedModel(turns=refund_script()), tools,
                        refund_gate, lookup=lookup)
        with pytest.raises(ValueError, match="in use by another process"):
            run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate,
                        Journal(journal.path))
    result = recover_run(Journal(journal.path), ScriptedModel(turns=refund_script()), tools,
                         refund_gate, lookup=lookup)
    assert result.stop == Stop.ANSWERED and len(effects) == 1


def test_the_lock_is_released_when_its_holder_dies(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "held.jsonl"
    holder = ("import os, sys; from agentbook import Journal, lock_journal\n"
              "with lock_journal(Journal(sys.argv[1])):\n"
              "    print('held', flush=True); os._exit(9)\n")
    done = subprocess.run([sys.executable, "-c", holder, str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout == "held\n" and done.returncode == 9
    with lock_journal(Journal(path)):  # the dead process left nothing locked
        pass


@pytest.mark.parametrize("damage", ['{"kind": "a"}\nnot json\n{"kind": "b"}\n',
                                    '{"kind": "a"}\n[1, 2]\n', '{"no kind": 1}\n'])
def test_damage_before_the_last_line_is_refused(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text(damage, encoding="utf-8")
    with pytest.raises(ValueError, match=r"journal j\.jsonl, line \d: not a journal record"):
        Journal(path).records()


def test_a_record_json_cannot_carry_is_refused_before_it_is_written(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    with pytest.raises(ValueError):
        journal.append({"kind": "a", "x": float("nan")})
    assert journal.records() == []


@pytest.mark.skipif(os.name != "posix", reason="only POSIX can open a folder to sync it")
def test_a_new_journal_syncs_the_folder_that_lists_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new file's name lives in its folder: until the folder is synced, a power cut can
    lose the whole journal, every synced record in it included."""
    synced: list[int] = []
    fsync = os.fsync

    def watched(descriptor: int) -> None:
        if stat.S_ISDIR(os.fstat(descriptor).st_mode):
            synced.append(os.fstat(descriptor).st_ino)
        fsync(descriptor)

    monkeypatch.setattr(os, "fsync", watched)
    journal = Journal(tmp_path / "new.jsonl")
    journal.append({"kind": "a"})
    assert synced == [tmp_path.stat().st_ino]
    journal.append({"kind": "b"})  # the name is durable already
    assert synced == [tmp_path.stat().st_ino]
    with lock_journal(Journal(tmp_path / "locked.jsonl")):  # locking creates the file too
        pass
    assert synced == [tmp_path.stat().st_ino] * 2


# ------------------------------------------------------------------ crashes and recovery


@pytest.mark.parametrize(("point", "index"), [("nowhere", 0), ("after_effect", -1),
                                              ("after_effect", True), ("after_effect", 1.0)])
def test_a_crash_point_must_exist(point: str, index: Any) -> None:
    with pytest.raises(ValueError):
        CrashAt(point, index)


def run_crashed(folder: Path, turns: list[dict[str, Any]],
                crash: CrashAt | None) -> tuple[Any, list[dict[str, Any]], bool]:
    """Run ``turns`` durably, crashed at ``crash``, and recover if it crashed.

    Returns the result, the effect log, and whether the crash happened.
    """
    tools, effects, lookup = make_keyed_environment()
    journal = Journal(folder / f"run-{crash.point if crash else 'none'}.jsonl")
    try:
        result = run_durably(TASK, ScriptedModel(turns=turns), tools, refund_gate, journal,
                             crash=crash)
    except Crash:
        result = recover_run(journal, ScriptedModel(turns=turns), tools, refund_gate,
                             lookup=lookup)
        return result, effects, True
    return result, effects, False


def crashed_after_intent(path: Path, tools: dict[str, Any]) -> Journal:
    """The journal of a refund run that crashed once the refund's intent was written."""
    journal = Journal(path)
    with pytest.raises(Crash):
        run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, journal,
                    crash=CrashAt("after_intent"))
    return journal


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_every_crash_point_is_reached_and_recovered_to_one_refund(
        tmp_path: Path, point: str) -> None:
    tools, effects, lookup = make_keyed_environment()
    journal = Journal(tmp_path / "run.jsonl")
    with pytest.raises(Crash, match=point):
        run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, journal,
                    crash=CrashAt(point))
    result = recover_run(journal, ScriptedModel(turns=refund_script()), tools, refund_gate,
                         lookup=lookup)
    assert result.stop == Stop.ANSWERED
    assert effects == [{"order_id": "A-17", "refunded_cents": 4999}]
    assert all(check_run(result, effects, Limits()).values())


def test_the_uncrashed_and_recovered_runs_have_equal_states(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain, _, _ = run_crashed(tmp_path / "a", refund_script(), None)
    recovered, _, _ = run_crashed(tmp_path / "b", refund_script(), CrashAt("after_effect"))
    assert recovered.state == plain.state


def test_keys_come_from_the_run_and_the_call_not_the_arguments(tmp_path: Path) -> None:
    tools, _, _ = make_keyed_environment()
    journal = Journal(tmp_path / "desk.jsonl")
    run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, journal)
    records = journal.records()
    run_id = records[0]["run_id"]
    assert run_id.startswith("run-") and len(run_id) == 36  # random, not the file's name
    intents = [r for r in records if r["kind"] == "intent"]
    assert [r["key"] for r in intents] == [f"{run_id}/2/0/call_2"]
    other = Journal(tmp_path / "other.jsonl")
    run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, other,
                run_id="run-7")
    assert [r["key"] for r in other.records() if r["kind"] == "intent"] == ["run-7/2/0/call_2"]


def test_reads_and_refusals_write_no_intent(tmp_path: Path) -> None:
    tools, effects, _ = make_keyed_environment()
    journal = Journal(tmp_path / "r.jsonl")
    turns = [message(entry("l", "lookup_order", {"order_id": "A-17"}), refund("big", 9999))]
    run_durably(TASK, ScriptedModel(turns=turns), tools, refund_gate, journal)
    assert [r for r in journal.records() if r["kind"] in ("intent", "outcome")] == []
    assert effects == []


def test_a_journal_that_holds_a_run_is_not_started_again(tmp_path: Path) -> None:
    tools, effects, _ = make_keyed_environment()
    journal = Journal(tmp_path / "r.jsonl")
    run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, journal)
    with pytest.raises(ValueError, match="already holds a run"):
        run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, journal)
    assert len(effects) == 1


@pytest.mark.parametrize("text", ["", '{"kind": "state", "seq": 1}\n',
                                  '{"kind": "start", "format": "agentbook journal, version 1", '
                                  '"run_id": "r", "seq": 1}\n'])
def test_recovering_a_journal_without_a_run_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(text, encoding="utf-8")
    tools, effects, lookup = make_keyed_environment()
    with pytest.raises(ValueError, match="holds no"):
        recover_run(Journal(path), ScriptedModel(turns=refund_script()), tools, refund_gate,
                    lookup=lookup)
    assert effects == []


def test_a_journal_of_another_format_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """Keys are derived as one journal format's code derives them: a journal that other code
    wrote could see its calls sent again under other keys, so recovery refuses it whole."""
    tools, effects, lookup = make_keyed_environment()
    journal = crashed_after_intent(tmp_path / "older.jsonl", tools)
    records = journal.records()
    records[0]["format"] = "agentbook journal, version 1"
    journal.path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(ValueError, match="holds no run"):
        recover_run(Journal(journal.path), ScriptedModel(turns=refund_script()), tools,
                    refund_gate, lookup=lookup)
    assert effects == []


def test_a_second_crash_during_recovery_is_recovered_too(tmp_path: Path) -> None:
    turns = [message(refund("a", 1000)), message(refund("b", 2000)), answer_message("done")]
    tools, effects, lookup = make_keyed_environment()
    journal = Journal(tmp_path / "twice.jsonl")
    with pytest.raises(Crash):
        run_durably(TASK, ScriptedModel(turns=turns), tools, refund_gate, journal,
                    crash=CrashAt("after_effect", 0))
    with pytest.raises(Crash):
        recover_run(journal, ScriptedModel(turns=turns), tools, refund_gate, lookup=lookup,
                    crash=CrashAt("after_effect", 1))
    result = recover_run(journal, ScriptedModel(turns=turns), tools, refund_gate,
                         lookup=lookup)
    assert [e["refunded_cents"] for e in effects] == [1000, 2000]
    assert result.stop == Stop.ANSWERED and all(check_run(result, effects, Limits()).values())


# ------------------------------------------------------------------- a lost reply


def lose_first_reply(tools: dict[str, Any]) -> None:
    from dataclasses import replace

    spec, answered = tools["refund_order"], []

    def flaky(**arguments: Any) -> Any:
        receipt = spec.handler(**arguments)
        answered.append(receipt)
        if len(answered) == 1:
            raise TimeoutError("no answer")
        return receipt

    tools["refund_order"] = replace(spec, handler=flaky)


def retrying() -> ScriptedModel:
    return ScriptedModel(turns=refund_script(),
                         reactions={"no answer": message(refund("call_3", 4999))})


def test_a_lost_reply_is_settled_by_its_key(tmp_path: Path) -> None:
    tools, effects, lookup = make_keyed_environment()
    lose_first_reply(tools)
    result = run_durably(TASK, retrying(), tools, refund_gate, Journal(tmp_path / "l.jsonl"),
                         lookup=lookup)
    assert len(effects) == 1
    assert result.state.observations[1].kind == "result"
    assert result.state.observations[1].content == effects[0]


def test_a_receipt_settled_by_key_is_a_copy_the_desk_cannot_edit(tmp_path: Path) -> None:
    tools, effects, lookup = make_keyed_environment()
    journal = Journal(tmp_path / "c.jsonl")
    with pytest.raises(Crash):
        run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, journal,
                    crash=CrashAt("after_effect"))
    result = recover_run(Journal(journal.path), ScriptedModel(turns=refund_script()), tools,
                         refund_gate, lookup=lookup)
    paid = result.state.observations[1]
    assert paid.content == effects[0] and paid.content is not effects[0]
    effects[0]["refunded_cents"] = 1  # an edit to the desk's log...
    assert paid.content == {"order_id": "A-17", "refunded_cents": 4999}  # ...stays there
    assert not check_run(result, effects, Limits())["effects_authorized"]


def test_without_lookup_the_harness_resends_under_the_same_key(tmp_path: Path) -> None:
    tools, effects, _ = make_keyed_environment()
    lose_first_reply(tools)
    result = run_durably(TASK, retrying(), tools, refund_gate, Journal(tmp_path / "l.jsonl"))
    assert len(effects) == 1
    assert [o.kind for o in result.state.observations] == ["result", "result"]


def test_in_the_kernel_the_models_retry_refunds_twice() -> None:
    plain, plain_effects = make_environment()
    lose_first_reply(plain)
    run_agent(TASK, retrying(), plain, refund_gate)
    assert len(plain_effects) == 2


def test_a_failure_before_the_effect_stays_an_error(tmp_path: Path) -> None:
    tools, effects, lookup = make_keyed_environment()
    turns = [message(entry("c", "refund_order", {"order_id": "A-17", "amount_cents": 5})),
             answer_message("ok")]
    from dataclasses import replace

    def down(**arguments: Any) -> Any:
        raise TimeoutError("payments are down")

    tools["refund_order"] = replace(tools["refund_order"], handler=down)
    result = run_durably(TASK, ScriptedModel(turns=turns), tools, refund_gate,
                         Journal(tmp_path / "d.jsonl"), lookup=lookup)
    assert result.state.observations[0].kind == "error" and effects == []


# --------------------------------------------------------------------- the property

proposal = st.one_of(
    st.just(("lookup_order", {"order_id": "A-17"})),
    st.just(("lookup_order", {"order_id": "Z-9"})),
    st.integers(min_value=-5, max_value=6000).map(
        lambda cents: ("refund_order", {"order_id": "A-17", "amount_cents": cents})),
)
scripts = st.lists(st.lists(proposal, min_size=1, max_size=3), min_size=1, max_size=3)


def to_turns(script: list[list[tuple[str, dict[str, Any]]]]) -> list[dict[str, Any]]:
    return [message(*(entry(f"t{turn}c{n}", name, arguments)
                      for n, (name, arguments) in enumerate(calls)))
            for turn, calls in enumerate(script)] + [answer_message("done")]


@settings(max_examples=60, deadline=None)
@given(script=scripts, point=st.sampled_from(CRASH_POINTS),
       index=st.integers(min_value=0, max_value=2))
def test_recovery_after_any_crash_matches_the_uncrashed_run(
        script: list[list[tuple[str, dict[str, Any]]]], point: str, index: int) -> None:
    turns = to_turns(script)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "a").mkdir()
        (Path(folder) / "b").mkdir()
        plain, plain_effects, _ = run_crashed(Path(folder) / "a", turns, None)
        result, effects, crashed = run_crashed(Path(folder) / "b", turns, CrashAt(point, index))
    event(f"crashed and recovered: {crashed}")
    assert effects == plain_effects
    assert result.state == plain.state and result.stop == plain.stop
    assert all(check_run(result, effects, Limits()).values())


# ------------------------------------------------------------- keys that never collide


def test_journals_of_one_name_in_two_folders_against_one_desk_both_pay(tmp_path: Path) -> None:
    tools, effects, lookup = make_keyed_environment()
    for folder in ("north", "south"):
        (tmp_path / folder).mkdir()
        result = run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate,
                             Journal(tmp_path / folder / "refund.jsonl"), lookup=lookup)
        assert result.state.observations[1].content == effects[-1]
    assert len(effects) == 2


def refund_of(cents: int) -> list[dict[str, Any]]:
    return [message(entry("call_1", "lookup_order", {"order_id": "A-17"})),
            message(refund("call_2", cents)), answer_message("Refunded.")]


@pytest.mark.parametrize("with_lookup", [True, False])
def test_a_key_applied_to_other_arguments_is_an_error_never_a_receipt(
        tmp_path: Path, with_lookup: bool) -> None:
    tools, effects, lookup = make_keyed_environment()
    run_durably(TASK, ScriptedModel(turns=refund_of(4999)), tools, refund_gate,
                Journal(tmp_path / "a.jsonl"), run_id="same")
    second = run_durably(TASK, ScriptedModel(turns=refund_of(1000)), tools, refund_gate,
                         Journal(tmp_path / "b.jsonl"), run_id="same",
                         lookup=lookup if with_lookup else None)
    seen = second.state.observations[1]
    assert (seen.ok, seen.kind) == (False, "error") and "refund" in seen.content
    assert effects == [{"order_id": "A-17", "refunded_cents": 4999}]


def test_recovery_settles_an_intent_applied_to_other_arguments_as_an_error(
        tmp_path: Path) -> None:
    tools, effects, lookup = make_keyed_environment()
    journal = Journal(tmp_path / "r.jsonl")
    with pytest.raises(Crash):
        run_durably(TASK, ScriptedModel(turns=refund_of(1000)), tools, refund_gate, journal,
                    crash=CrashAt("after_intent"), run_id="same")
    handler = tools["refund_order"].handler  # another run took the key meanwhile
    handler(order_id="A-17", amount_cents=4999, idempotency_key="same/2/0/call_2")
    result = recover_run(journal, ScriptedModel(turns=refund_of(1000)), tools, refund_gate,
                         lookup=lookup)
    assert result.state.observations[1].kind == "error" and len(effects) == 1


# -------------------------------------------------- what recovery trusts, and its limits


# A refund the desk applied before the crash is reported as paid under a gate that now denies
# it; an intent it never applied is judged by the recovery's gate.
@pytest.mark.parametrize(("crash_point", "kind", "refunds"),
                         [("after_effect", "result", 1), ("after_intent", "denied", 0)])
def test_recovery_settles_what_was_paid_and_gates_what_was_not(
        tmp_path: Path, crash_point: str, kind: str, refunds: int) -> None:
    tools, effects, lookup = make_keyed_environment()
    journal = Journal(tmp_path / "g.jsonl")
    with pytest.raises(Crash):
        run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, journal,
                    crash=CrashAt(crash_point))
    result = recover_run(journal, ScriptedModel(turns=refund_script()), tools,
                         lambda call: (False, "refunds suspended"), lookup=lookup)
    assert result.state.observations[1].kind == kind and len(effects) == refunds


def test_a_desk_that_forgot_its_keys_pays_again(tmp_path: Path) -> None:
    """The guarantee's first condition, shown failing: it is not the harness's to keep."""
    tools, effects, _ = make_keyed_environment()
    journal = Journal(tmp_path / "f.jsonl")
    with pytest.raises(Crash):
        run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, journal,
                    crash=CrashAt("after_effect"))
    pruned, later, pruned_lookup = make_keyed_environment()
    recover_run(journal, ScriptedModel(turns=refund_script()), pruned, refund_gate,
                lookup=pruned_lookup)
    assert len(effects) + len(later) == 2


def test_a_crashed_run_started_afresh_pays_again(tmp_path: Path) -> None:
    """The guarantee's second condition, shown failing: a run started again from its task,
    its journal lost, has a new run id, so the same refund goes out under a second key."""
    tools, effects, lookup = make_keyed_environment()
    journal = Journal(tmp_path / "lost.jsonl")
    with pytest.raises(Crash):
        run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, journal,
                    crash=CrashAt("after_effect"))
    first_key = journal.records()[-1]["key"]
    journal.path.unlink()
    again = Journal(journal.path)
    run_durably(TASK, ScriptedModel(turns=refund_script()), tools, refund_gate, again,
                lookup=lookup)
    keys = [r["key"] for r in again.records() if r["kind"] == "intent"]
    assert len(keys) == 1 and keys != [first_key]
    assert len(effects) == 2


@pytest.mark.parametrize(("with_key", "refunds"), [(False, 2), (True, 1)])
def test_a_refund_made_without_its_key_is_invisible_to_recovery(
        tmp_path: Path, with_key: bool, refunds: int) -> None:
    """The guarantee's third condition: a refund that reaches the money by another path,
    without the key, cannot be matched to the journal's intent, and is paid again; sent with
    the key, the same refund is recognized."""
    tools, effects, lookup = make_keyed_environment()
    journal = crashed_after_intent(tmp_path / "by-hand.jsonl", tools)
    key = journal.records()[-1]["key"]
    by_hand = {"idempotency_key": key} if with_key else {}
    tools["refund_order"].handler(order_id="A-17", amount_cents=4999, **by_hand)
    result = recover_run(journal, ScriptedModel(turns=refund_script()), tools, refund_gate,
                         lookup=lookup)
    assert result.stop == Stop.ANSWERED and len(effects) == refunds


def test_a_failed_model_call_is_finished_by_recovery_with_one_refund(tmp_path: Path) -> None:
    class Outage:
        def __init__(self) -> None:
            self.script, self.calls = ScriptedModel(turns=refund_script()), 0

        def chat(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
            self.calls += 1
            if self.calls == 3:  # after the refund was paid
                raise TimeoutError("the provider did not answer")
            return self.script.chat(messages)

    tools, effects, lookup = make_keyed_environment()
    journal = Journal(tmp_path / "m.jsonl")
    with pytest.raises(TimeoutError):
        run_durably(TASK, Outage(), tools, refund_gate, journal)
    assert len(effects) == 1
    result = recover_run(journal, ScriptedModel(turns=refund_script()), tools, refund_gate,
                         lookup=lookup)
    assert result.stop == Stop.ANSWERED and len(effects) == 1
    assert all(check_run(result, effects, Limits()).values())


def test_recovery_after_recovery_with_a_torn_tail_each_time(tmp_path: Path) -> None:
    turns = [message(refund("a", 1000)), message(refund("b", 2000)), answer_message("done")]
    tools, effects, lookup = make_keyed_environment()
    journal = Journal(tmp_path / "torn.jsonl")
    crashes = [CrashAt("after_effect", 0), CrashAt("after_effect", 1)]
    with pytest.raises(Crash):
        run_durably(TASK, ScriptedModel(turns=turns), tools, refund_gate, journal,
                    crash=crashes[0])
    for crash in [crashes[1], None]:
        with journal.path.open("a", encoding="utf-8") as file:
            file.write('{"kind": "outc')
        try:
            result = recover_run(Journal(journal.path), ScriptedModel(turns=turns), tools,
                                 refund_gate, lookup=lookup, crash=crash)
        except Crash:
            continue
    assert result.stop == Stop.ANSWERED and [e["refunded_cents"] for e in effects] == [
        1000, 2000]
    assert [r["seq"] for r in journal.records()] == list(range(1, len(journal.records()) + 1))


def test_a_model_that_reuses_a_call_id_still_gets_one_key_per_effect(tmp_path: Path) -> None:
    tools, effects, lookup = make_keyed_environment()
    turns = [message(refund("c", 100), refund("c", 200)), message(refund("c", 300)),
             answer_message("done")]
    journal = Journal(tmp_path / "reused.jsonl")
    with pytest.raises(Crash):
        run_durably(TASK, ScriptedModel(turns=turns), tools, refund_gate, journal,
                    crash=CrashAt("after_effect", 2))
    recover_run(journal, ScriptedModel(turns=turns), tools, refund_gate, lookup=lookup)
    assert [e["refunded_cents"] for e in effects] == [100, 200, 300]
    keys = [r["key"] for r in journal.records() if r["kind"] == "intent"]
    assert len(keys) == len(set(keys)) == 3


@pytest.mark.parametrize("damage", [
    lambda r: r[0].pop("run_id"),
    lambda r: r[0].update(run_id=7),
    lambda r: next(x for x in r if x["kind"] == "intent").pop("key"),
    lambda r: next(x for x in reversed(r) if x["kind"] == "state").update(state=5),
])
def test_a_journal_edited_by_hand_is_refused_with_a_reason_and_pays_nothing(
        tmp_path: Path, damage: Any) -> None:
    tools, effects, lookup = make_keyed_environment()
    journal = crashed_after_intent(tmp_path / "edited.jsonl", tools)
    records = journal.records()
    damage(records)
    journal.path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(ValueError, match="journal|state"):
        recover_run(Journal(journal.path), ScriptedModel(turns=refund_script()), tools,
                    refund_gate, lookup=lookup)
    assert effects == []


@pytest.mark.parametrize(("damage", "problem"), [
    (lambda r: r[-1].pop("key"), "'intent' without its fields"),
    (lambda r: r[1].pop("state"), "'state' without its fields"),
    (lambda r: r.append({"kind": "outcome", "key": r[-1]["key"]}),
     "'outcome' without its fields"),
    (lambda r: r.append({"kind": "bogus"}), "'bogus' without its fields"),
    (lambda r: r.append({"kind": ["state"], "state": {}}), "without its fields"),
    (lambda r: r.insert(2, dict(r[0], run_id="other")), "starts in its first record"),
    (lambda r: r[0].update(kind="state", state={}), "starts in its first record"),
])
def test_a_record_renumbered_to_fit_is_still_refused_by_line_before_anything_pays(
        tmp_path: Path, damage: Any, problem: str) -> None:
    """Records edited into other valid JSON, their sequence renumbered so that
    reading the file passes: each is refused with a ValueError, not a KeyError."""
    tools, effects, lookup = make_keyed_environment()
    journal = crashed_after_intent(tmp_path / "forged.jsonl", tools)
    records = journal.records()
    assert records[-1]["kind"] == "intent"
    damage(records)
    journal.path.write_text("".join(json.dumps({**r, "seq": n}) + "\n"
                                    for n, r in enumerate(records, start=1)),
                            encoding="utf-8")
    with pytest.raises(ValueError, match=problem):
        recover_run(Journal(journal.path), ScriptedModel(turns=refund_script()), tools,
                    refund_gate, lookup=lookup)
    assert effects == []


@pytest.mark.parametrize("deep", ["[" * 400 + "]" * 400, "[" * 100_000 + "]" * 100_000])
def test_a_journaled_state_nested_too_deeply_is_refused_not_a_recursion_error(
        tmp_path: Path, deep: str) -> None:
    start = ('{"kind": "start", "format": "agentbook journal, version 2", '
             '"run_id": "r", "seq": 1}\n')
    state = ('{"kind": "state", "seq": 2, "state": {"messages": [{"role": "system", '
             '"content": "s"}, {"role": "user", "content": ' + deep + '}], '
             '"observations": [], "prompt_token_log": [], "turns": 0}}\n')
    path = tmp_path / "deep.jsonl"
    path.write_text(start + state, encoding="utf-8")
    tools, effects, lookup = make_keyed_environment()
    with pytest.raises(ValueError, match="nested deeper|not a journal record"):
        recover_run(Journal(path), ScriptedModel(turns=[answer_message("Hi.")]), tools,
                    refund_gate, lookup=lookup)
    assert effects == []


@pytest.mark.parametrize("odd", ["decimal", "deep"])
def test_a_reply_json_cannot_carry_pays_nothing_in_the_run_or_its_recovery(
        tmp_path: Path, odd: str) -> None:
    """Chapter 1 refuses such a reply's calls; the journal keeps that verdict in
    the message, so a recovery that reads it again refuses them too."""
    from decimal import Decimal

    from agentbook import ApprovalPolicy, run_with_approvals

    value: Any = Decimal("1")
    if odd == "deep":
        value = "bottom"
        for _ in range(5000):
            value = [value]
    reply = {**message(refund("call_1", 100)), "content": value}
    tools, effects, lookup = make_keyed_environment()
    paused = run_with_approvals(TASK, ScriptedModel(turns=[reply, answer_message("No.")]),
                                tools, ApprovalPolicy())
    assert paused.stop == Stop.ANSWERED and effects == []  # type: ignore[union-attr]
    journal = Journal(tmp_path / "odd.jsonl")
    result = run_durably(TASK, ScriptedModel(turns=[reply, answer_message("No.")]), tools,
                         refund_gate, journal, lookup=lookup)
    assert result.stop == Stop.ANSWERED and effects == []
    assert result.state.observations[0].kind == "invalid"
    lines = journal.path.read_text(encoding="utf-8").splitlines(keepends=True)
    journal.path.write_text("".join(lines[:3]), encoding="utf-8")  # start, state, reply
    recovered = recover_run(Journal(journal.path),
                            ScriptedModel(turns=[reply, answer_message("No.")]), tools,
                            refund_gate, lookup=lookup)
    assert recovered.state == result.state and effects == []


# ------------------------------------------------------ the chapter's table of attacks


def check_the_tables_test_names(chapter: str) -> tuple[int, int]:
    """Check a chapter's tables of "What can still go wrong": each row names the tests that
    fail without the row's defense (or show the limit it names), and each test exists in its
    file. A table names its file in its header (`Test in `tests/test_x.py``), or each row
    names the file before its tests (`test_x.py`: `test_a`, `test_b`). Returns how many rows
    and test names it read."""
    folder = Path(__file__).parent
    notebook = json.loads((folder.parent / "chapters" / chapter).read_text(encoding="utf-8"))
    text = "\n".join("".join(cell["source"]) for cell in notebook["cells"]
                     if cell["cell_type"] == "markdown")
    source, table, rows, named = "", False, 0, 0
    for line in text.splitlines():
        header = re.match(r"\| Attack .*\| (Test in `tests/(test_\w+\.py)`|Where its test "
                          r"lives) \|$", line)
        if header:
            table = True
            source = (folder / header.group(2)).read_text(encoding="utf-8") if header.group(
                2) else ""
        elif line.startswith("| ") and table:
            rows += 1
            for name in re.findall(r"`(test_\w+(?:\.py)?)`",
                                   line.rstrip(" |").rsplit("| ", 1)[1]):
                if name.endswith(".py"):
                    source = (folder / name).read_text(encoding="utf-8")
                    continue
                assert re.search(rf"^def {name}\(", source, re.MULTILINE), (line, name)
                named += 1
        elif not line.startswith("|"):
            table = False
    return rows, named


def test_every_test_the_chapters_tables_name_exists_in_their_file() -> None:
    rows, named = check_the_tables_test_names("02_durable.ipynb")
    assert rows >= 13 and named >= 24
