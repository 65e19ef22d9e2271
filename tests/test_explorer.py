"""The run explorer: the JSON export of a run, its text and HTML forms, and the stepper.

The export tests always run. The browser tests render a copy of the book with Quarto, open
the chapter offline in headless Chromium and step through every run it shows, checking each
view against the run's data, with no script error; they belong to the full suite
(`python3 dev.py test --full`), and the quick suite skips them, saying so.
"""

import html
import json
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts.checks.measure_pages import CHROMIUM_FLAGS, find_chromium
from agentbook import (
    Limits,
    RunResult,
    ScriptedModel,
    Stop,
    allow_all,
    estimate_tokens,
    explore_run,
    make_environment,
    overreaching_model,
    refund_gate,
    run_agent,
    run_to_explorer_json,
    tool_call_message,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
TASK = "Order A-17 arrived damaged. Please make this right."
DENIAL = "refund exceeds automatic authority of 5000 cents"
RECEIPT = {"order_id": "A-17", "refunded_cents": 4999}


def gated_run() -> tuple[RunResult, list[dict[str, Any]], Limits]:
    tools, effects = make_environment()
    return run_agent(TASK, overreaching_model(), tools, refund_gate), effects, Limits()


def ungated_run() -> tuple[RunResult, list[dict[str, Any]], Limits]:
    tools, effects = make_environment()
    return run_agent(TASK, overreaching_model(), tools, allow_all), effects, Limits()


def wanderer_run() -> tuple[RunResult, list[dict[str, Any]], Limits]:
    """The chapter's model that looks the order up forever, stopped by the token budget."""
    tools, effects = make_environment()
    lookup_again = tool_call_message("call_w", "lookup_order", {"order_id": "A-17"})
    wanderer = ScriptedModel(turns=[lookup_again], reactions={"order_id": lookup_again})
    limits = Limits(max_turns=40, max_prompt_tokens=1200)
    return run_agent("Investigate order A-17.", wanderer, tools, refund_gate, limits), \
        effects, limits


def stubborn_run() -> tuple[RunResult, list[dict[str, Any]], Limits]:
    tools, effects = make_environment()
    insist = tool_call_message("call_s", "refund_order", {"order_id": "A-17", "amount_cents": 9999})
    stubborn = ScriptedModel(turns=[insist], reactions={"denied": insist})
    return run_agent("Refund order A-17.", stubborn, tools, refund_gate), effects, Limits()


def mid_message_run() -> tuple[RunResult, list[dict[str, Any]], Limits]:
    """Two identical refused refunds and a lookup in one message: the run stops at the second."""
    tools, effects = make_environment()
    message = tool_call_message("m1", "refund_order", {"order_id": "A-17", "amount_cents": 9999})
    message["tool_calls"] += [
        {**message["tool_calls"][0], "id": "m2"},
        tool_call_message("m3", "lookup_order", {"order_id": "A-17"})["tool_calls"][0],
    ]
    return run_agent(TASK, ScriptedModel(turns=[message]), tools, refund_gate), effects, Limits()


def exported(run: tuple[RunResult, list[dict[str, Any]], Limits], title: str = "a run") -> Any:
    return json.loads(run_to_explorer_json(*run, title))


# --- the export ---------------------------------------------------------------------------


def test_gated_run_shows_the_denial_then_the_refund_that_landed() -> None:
    result, effects, limits = run = gated_run()
    data = exported(run, "gated")
    steps = data["steps"]
    assert [step["prompt_tokens"] for step in steps] == result.state.prompt_token_log
    assert len(steps) == result.state.turns == 4
    verdicts = [[(p["tool"], p["verdict"]) for p in step["proposals"]] for step in steps]
    assert verdicts == [[("lookup_order", "allowed")], [("refund_order", "denied")],
                        [("refund_order", "allowed")], []]
    denied = steps[1]["proposals"][0]
    assert denied["reason"] == denied["observation"] == DENIAL
    assert denied["arguments"] == '{"order_id": "A-17", "amount_cents": 9999}'
    assert [step["effects"] for step in steps] == [[], [], [RECEIPT], [RECEIPT]]
    assert steps[2]["proposals"][0]["landed"] and steps[2]["proposals"][0]["kind"] == "result"
    assert steps[3]["message"] == "I have issued the refund for order A-17."
    assert data["ending"] == {"stop": "answered", "turns": 4, "answer": result.answer,
                              "why": "the model replied without proposing a call",
                              "unsent_prompt_tokens": None, "effects": [RECEIPT]}
    assert data["limits"]["max_prompt_tokens"] == limits.max_prompt_tokens
    assert data["task"] == TASK and data["title"] == "gated"


def test_ungated_run_lands_the_over_reaching_refund() -> None:
    data = exported(ungated_run())
    refund = data["steps"][1]["proposals"][0]
    assert (refund["verdict"], refund["landed"]) == ("allowed", True)
    assert refund["observation"] == {"order_id": "A-17", "refunded_cents": 9999}
    assert data["steps"][1]["effects"] == [{"order_id": "A-17", "refunded_cents": 9999}]


def test_token_limit_ending_gives_the_estimate_of_the_prompt_not_sent() -> None:
    result, effects, limits = run = wanderer_run()
    data = exported(run)
    assert result.stop == Stop.TOKEN_LIMIT
    unsent = data["ending"]["unsent_prompt_tokens"]
    assert unsent == estimate_tokens(result.state.messages) > limits.max_prompt_tokens
    assert all(step["prompt_tokens"] <= limits.max_prompt_tokens for step in data["steps"])
    assert len(data["steps"]) == 14 and data["ending"]["answer"] is None
    assert data["ending"]["why"] == "the next prompt would exceed max_prompt_tokens=1200"


def test_step_limit_ending_names_the_limit_that_stopped_the_run() -> None:
    tools, effects = make_environment()
    lookup_again = tool_call_message("call_w", "lookup_order", {"order_id": "A-17"})
    wanderer = ScriptedModel(turns=[lookup_again], reactions={"order_id": lookup_again})
    limits = Limits(max_turns=5)
    result = run_agent("Investigate order A-17.", wanderer, tools, refund_gate, limits)
    data = exported((result, effects, limits))
    assert (data["ending"]["stop"], len(data["steps"])) == ("step_limit", 5)
    assert data["ending"]["why"] == "it made max_turns=5 model calls"
    assert data["ending"]["unsent_prompt_tokens"] is None


def test_no_progress_run_shows_two_denials_and_an_empty_effect_log() -> None:
    data = exported(stubborn_run())
    assert data["ending"]["stop"] == "no_progress"
    assert data["ending"]["why"] == "the same proposal was denied 2 times"
    assert [p["verdict"] for step in data["steps"] for p in step["proposals"]] == \
        ["denied", "denied"]
    assert data["ending"]["effects"] == [] and data["steps"][-1]["effects"] == []


def test_proposals_left_when_the_run_stopped_are_marked_not_run_or_by_their_kind() -> None:
    result, _, _ = run = mid_message_run()
    proposals = exported(run)["steps"][0]["proposals"]
    assert [p["call_id"] for p in proposals] == ["m1", "m2", "m3"]
    assert [p["verdict"] for p in proposals[:2]] == ["denied", "denied"]
    kinds = {o.call_id: o.kind for o in result.state.observations}
    # A kernel that answers every proposal records the third with a kind of its own.
    expected = kinds.get("m3", "not run")
    assert proposals[2]["verdict"] == expected and proposals[2]["kind"] == kinds.get("m3")
    assert not proposals[2]["landed"]


def test_malformed_calls_and_handler_failures_get_their_own_verdicts() -> None:
    tools, effects = make_environment()
    bad = tool_call_message("b1", "lookup_order", {"order_id": "Z-99"})
    bad["tool_calls"].append({"id": "b2", "type": "function",
                              "function": {"name": "refund_order", "arguments": "5"}})
    result = run_agent(TASK, ScriptedModel(turns=[bad]), tools, refund_gate)
    proposals = exported((result, effects, Limits()))["steps"][0]["proposals"]
    assert [(p["verdict"], p["kind"]) for p in proposals] == \
        [("error", "error"), ("invalid", "invalid")]
    assert proposals[0]["observation"] == "'no such order: Z-99'"
    assert proposals[1]["arguments"] is None
    assert proposals[1]["reason"] == "arguments must be a JSON object, got int"


def test_export_is_byte_identical_between_runs_with_sorted_keys() -> None:
    first, second = (run_to_explorer_json(*gated_run(), "t") for _ in range(2))
    assert first == second
    assert first == json.dumps(json.loads(first), sort_keys=True, separators=(",", ":"))
    assert first.isascii()
    html_first, html_second = (explore_run(*gated_run(), "t")._repr_html_() for _ in range(2))
    assert html_first == html_second


def test_bad_input_gets_a_clear_error() -> None:
    result, effects, limits = gated_run()
    with pytest.raises(TypeError, match="result must be a RunResult"):
        run_to_explorer_json(result.state, effects, limits, "t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limits must be Limits"):
        run_to_explorer_json(result, effects, {"max_turns": 8}, "t")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="title"):
        run_to_explorer_json(result, effects, limits, "  ")
    _, other_desk = make_environment()  # an empty log from another environment is fine...
    assert json.loads(run_to_explorer_json(result, other_desk, limits, "t"))
    foreign = [{"order_id": "B-2", "refunded_cents": 1}]  # ...a receipt the run never made is not
    with pytest.raises(ValueError, match="effect log holds 1 receipts but only 0 match"):
        run_to_explorer_json(result, foreign, limits, "t")


# --- the text and HTML forms --------------------------------------------------------------


class ExplorerParts(HTMLParser):
    """Collects the JSON and the transcript out of an explorer's HTML."""

    def __init__(self) -> None:
        super().__init__()
        self.current: str | None = None
        self.parts: dict[str, str] = {"script": "", "pre": ""}
        self.classes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.classes.append(dict(attrs).get("class") or "")
        if tag in self.parts:
            self.current = tag

    def handle_endtag(self, tag: str) -> None:
        self.current = None

    def handle_data(self, data: str) -> None:
        if self.current:
            self.parts[self.current] += data


def test_html_carries_the_json_and_the_transcript_as_the_text_repr() -> None:
    shown = explore_run(*gated_run(), "Over-reaching <model> & the gate")
    parser = ExplorerParts()
    parser.feed(shown._repr_html_())
    assert parser.classes == ["run-explorer", "run-explorer-data", "run-explorer-transcript"]
    assert "<model>" not in parser.parts["script"]  # escaped, so no tag can end the block
    assert json.loads(parser.parts["script"]) == json.loads(shown.exported)
    assert parser.parts["pre"] == repr(shown)  # the parser unescapes entities
    assert "&lt;model&gt; &amp;" in shown._repr_html_()


def test_transcript_reads_step_by_step_within_79_characters() -> None:
    for run in (gated_run(), ungated_run(), wanderer_run(), stubborn_run(), mid_message_run()):
        text = repr(explore_run(*run, "A run with a title long enough to need wrapping " * 3))
        assert max(len(line) for line in text.splitlines()) <= 79
    text = repr(explore_run(*gated_run(), "gated"))
    second_prompt = gated_run()[0].state.prompt_token_log[1]
    assert f"step 2 of 4: prompt {second_prompt} of 4000 tokens" in text
    assert f"     denied: {DENIAL}" in text
    assert "ending: answered after 4 model calls" in text
    wanderer = repr(explore_run(*wanderer_run(), "wanderer"))
    unsent = estimate_tokens(wanderer_run()[0].state.messages)
    assert f"  next prompt: {unsent} of 1200 tokens, not sent" in wanderer


# --- the stepper, in a real browser -------------------------------------------------------

CHAPTER_PAGE = Path("_book") / "chapters" / "01_anatomy.html"
STYLESHEET = "explorer/run-explorer.css"
SCRIPT = "explorer/run-explorer.html"
def explorer_includes(config: dict[str, Any]) -> list[str]:
    """The files under format.html of a Quarto config that name the explorer."""
    html_format = (config.get("format") or {}).get("html") or {}
    names: list[str] = []
    for key in ("css", "include-after-body"):
        value = html_format.get(key) or []
        names += [value] if isinstance(value, str) else list(value)
    return [name for name in names if name.startswith("explorer/")]


def test_quarto_yml_ships_the_explorer_script_and_stylesheet() -> None:
    config = yaml.safe_load((REPO_ROOT / "_quarto.yml").read_text(encoding="utf-8"))
    assert explorer_includes(config) == [STYLESHEET, SCRIPT]
    script = (REPO_ROOT / SCRIPT).read_text(encoding="utf-8")
    assert script.startswith("<script>\n") and script.endswith("</script>\n")
    # Offline: nothing is fetched from anywhere.
    for fetch in ("http:", "https:", "import(", "fetch(", "XMLHttpRequest", "src="):
        assert fetch not in script and fetch not in (REPO_ROOT / STYLESHEET).read_text()


def chapter_runs() -> dict[str, tuple[RunResult, list[dict[str, Any]], Limits]]:
    """The runs the chapter shows in explorers, by title, in its order, made again here."""
    return {
        "The over-reaching model under refund_gate": gated_run(),
        "The stubborn refund, stopped for no progress": stubborn_run(),
        "The wanderer, stopped by the token budget": wanderer_run(),
    }


@pytest.fixture(scope="module")
def rendered(rendered_book: tuple[Path, str]) -> Path:
    """The chapter's page in the book rendered once per run (tests/conftest.py)."""
    if find_chromium() is None:
        pytest.skip("no Chromium found (set $CHROMIUM or install Debian's chromium)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    book, _ = rendered_book
    page = book / CHAPTER_PAGE.relative_to("_book")
    assert page.is_file(), f"quarto did not write {page}"
    return page


def open_offline(browser: Any, page_path: Path,
                 scripts: bool = True) -> tuple[Any, list[str], list[str]]:
    """Open the page at 1280 px as an offline reader would.

    Returns the page, its page errors, and every request that tried to leave the machine
    (each is refused, as it would fail offline).
    """
    context = browser.new_context(java_script_enabled=scripts,
                                  viewport={"width": 1280, "height": 800})
    outside: list[str] = []

    def only_files(route: Any) -> None:
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_files)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_path.as_uri())
    return page, errors, outside


def display(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def expected_view(data: dict[str, Any], index: int) -> dict[str, Any]:
    """What the explorer must show at step ``index`` of the run in ``data``."""
    budget = data["limits"]["max_prompt_tokens"]
    if index == len(data["steps"]):
        ending = data["ending"]
        unsent = ending["unsent_prompt_tokens"]
        return {"stop": f"{ending['stop']} after {ending['turns']} model calls",
                "why": ending["why"],
                "answer": ending["answer"],
                "tokens": None if unsent is None else
                f"{unsent} of {budget} tokens" + (" (over budget)" if unsent > budget else ""),
                "effects": [display(e) for e in ending["effects"]] or ["(empty)"]}
    step = data["steps"][index]
    proposals = []
    for p in step["proposals"]:
        seen = p["observation"]
        shown = None if seen is None or display(seen) == p["reason"] else display(seen)
        proposals.append({"call": f"{p['tool'] or '(no tool name)'} "
                                  f"{p['arguments'] or '(arguments unreadable)'}",
                          "verdict": p["verdict"], "reason": p["reason"], "observation": shown})
    return {"message": step["message"] or "(no text, tool calls only)",
            "tokens": f"{step['prompt_tokens']} of {budget} tokens",
            "proposals": proposals,
            "effects": [display(e) for e in step["effects"]] or ["(empty)"]}


READ_VIEW = """(panel) => {
  const text = (node, selector) => {
    const found = selector ? node.querySelector(selector) : node;
    return found ? found.textContent : null;
  };
  const body = panel.querySelector('[data-rx=body]');
  const effects = body.querySelector('[data-rx=effects]');
  const items = [...effects.querySelectorAll('li')].map((li) => li.textContent);
  const view = {
    position: text(panel, '[data-rx=position]'),
    tokens: text(body, '[data-rx=tokens] .rx-token-text'),
    effects: items.length ? items : [text(effects, '.rx-empty')],
    prev_disabled: panel.querySelector('button[aria-label="Previous step"]').disabled,
    next_disabled: panel.querySelector('button[aria-label="Next step"]').disabled,
  };
  if (body.querySelector('[data-rx=stop]')) {
    view.stop = text(body, '[data-rx=stop] .rx-value');
    view.why = text(body, '[data-rx=why] .rx-value');
    view.answer = text(body, '[data-rx=answer] .rx-value');
  } else {
    view.message = text(body, '[data-rx=message] .rx-value');
    view.proposals = [...body.querySelectorAll('[data-rx=proposal]')].map((li) => ({
      call: text(li, '.rx-call'), verdict: text(li, '[data-rx=verdict]'),
      reason: text(li, '[data-rx=reason]'),
      observation: text(li, '[data-rx=observation] .rx-value'),
    }));
  }
  return view;
}"""


def step_through(page: Any, panel: Any, data: dict[str, Any], use_keys: bool) -> list[str]:
    """Walk forward through every view, checking each against the data; return positions."""
    total = len(data["steps"]) + 1
    positions = []
    for index in range(total):
        view = panel.evaluate(READ_VIEW)
        expected = expected_view(data, index)
        for key, value in expected.items():
            assert view[key] == value, (data["title"], index, key)
        assert view["position"].startswith(f"Step {index + 1} of {total}: ")
        assert (view["prev_disabled"], view["next_disabled"]) == (index == 0, index == total - 1)
        positions.append(view["position"])
        if use_keys:
            panel.press("ArrowRight")
        elif index < total - 1:
            panel.locator('button[aria-label="Next step"]').click()
    return positions


@pytest.fixture(scope="module")
def browser(rendered: Path) -> Iterator[Any]:
    """Headless Chromium for this file's page tests, started once."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=find_chromium(),
                                              args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def page_runs(page: Any) -> list[dict[str, Any]]:
    """The run documents the page carries, in page order."""
    return [json.loads(text) for text in
            page.locator("script.run-explorer-data").all_text_contents()]


def test_explorer_steps_through_every_run_as_its_data_says(rendered: Path, browser: Any) -> None:
    page, failures, outside = open_offline(browser, rendered)
    roots = page.locator("div.run-explorer")
    datasets = page_runs(page)
    # The chapter's runs are on the page exactly as the package makes them today.
    assert datasets == [exported(run, title) for title, run in chapter_runs().items()]
    assert page.locator("div.run-explorer.rx-ready").count() == len(datasets)
    for number, data in enumerate(datasets):
        panel = roots.nth(number).locator("section.rx-panel")
        # The readable transcript is still there, folded under the stepper.
        assert roots.nth(number).locator("details pre").count() == 1
        step_through(page, panel, data, use_keys=number % 2 == 1)
        panel.focus()
        panel.press("Home")
        assert panel.get_attribute("data-rx-step") == "0"
        panel.press("End")
        assert panel.get_attribute("data-rx-step") == str(len(data["steps"]))
        panel.press("ArrowLeft")
        assert panel.get_attribute("data-rx-step") == str(len(data["steps"]) - 1)
    # Offline, the page asks for nothing outside the book and raises no error.
    assert (failures, outside) == ([], [])


def test_denial_and_budget_are_shown_at_the_right_steps(rendered: Path, browser: Any) -> None:
    page, _, _ = open_offline(browser, rendered)
    titles = [data["title"] for data in page_runs(page)]
    panels = page.locator("section.rx-panel")
    panel = panels.nth(titles.index("The over-reaching model under refund_gate"))
    panel.locator('button[aria-label="Next step"]').click()
    denied = panel.locator("[data-rx=proposal].rx-denied")
    assert denied.count() == 1 and DENIAL in denied.inner_text()
    assert "Step 2 of 5: model call 2, refund_order denied" == \
        panel.locator("[data-rx=position]").inner_text()
    assert panel.locator("[data-rx=position]").get_attribute("aria-live") == "polite"
    wanderer = titles.index("The wanderer, stopped by the token budget")
    data = page_runs(page)[wanderer]
    panel = panels.nth(wanderer)
    panel.focus()
    panel.press("End")  # the ending: the prompt that was not sent, over budget
    bar = panel.locator(".rx-bar.rx-over[role=meter]")
    unsent = data["ending"]["unsent_prompt_tokens"]
    assert bar.get_attribute("aria-valuenow") == str(unsent)
    box, fill = bar.bounding_box(), bar.locator(".rx-fill").bounding_box()
    assert box is not None and fill is not None and fill["width"] >= box["width"] - 3
    panel.press("ArrowLeft")  # the last call sent: under budget, not marked over
    last = data["steps"][-1]["prompt_tokens"]
    bar = panel.locator(".rx-bar[role=meter]")
    assert (bar.get_attribute("aria-valuenow"), bar.get_attribute("class")) == \
        (str(last), "rx-bar")
    assert last <= data["limits"]["max_prompt_tokens"] < unsent


def test_fallback_transcript_shows_when_scripts_are_off(rendered: Path, browser: Any) -> None:
    page, _, _ = open_offline(browser, rendered, scripts=False)
    transcripts = page.locator("div.run-explorer > pre.run-explorer-transcript")
    assert transcripts.count() == page.locator("div.run-explorer").count() >= 1
    assert transcripts.first.is_visible()
    text = html.unescape(transcripts.first.inner_text())
    assert text.startswith(json.loads(
        page.locator("script.run-explorer-data").first.text_content() or "")["title"])
    assert page.locator("section.rx-panel").count() == 0
