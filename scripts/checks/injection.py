"""Chapter 3's defenses, measured on AgentDojo with this book's kernel.

    python -m scripts.checks.injection --suite NAME [--defense D ...] [--json OUT]
                                       [--benchmark-version V]

It loads one suite of AgentDojo's benchmark (``BENCHMARK_VERSION`` of the pinned
``agentdojo`` release) by name through AgentDojo's own ``get_suites``, turns each of its
functions into a ``ToolSpec`` (``tool_contract`` says how AgentDojo's JSON Schema becomes the
book's contract), and runs Chapter 1's ``run_agent`` on every user task:

- once with a *ground-truth* scripted model, which proposes the task's ground-truth calls
  (``ground_truth(pre_environment)``, as AgentDojo's ``GroundTruthPipeline`` does) and then
  gives the task's ground-truth answer; no attack;
- once for every injection task with the *obedient* model of Chapter 3: AgentDojo's attack
  ``ATTACK`` fills the injection vectors that the user task's ground truth reads with the
  injection task's goal; the model follows its own plan (the user task's ground truth) and,
  the first time a tool result carries the goal, performs the injection task's ground-truth
  calls. It is the worst case, a model that obeys every instruction it reads.

Each run goes through AgentDojo's ``TaskSuite.run_task_with_pipeline`` (``BookKernel`` is the
pipeline), so the environment, its injections and the scoring (utility, and whether the
injection task's security check says the attack succeeded) are AgentDojo's own. The trace
given to AgentDojo's checks holds the calls the kernel executed: a proposal that the gate
refused or that broke the contract never reached the environment. Tool results reach the
model as AgentDojo's YAML, unfolded (``unfolded_yaml`` says why).

Both scripted models know their ground truth's arguments in advance, values that a real
model would have to read from the data: these runs measure what a defense lets through,
not how well a model reads. It shows in one place: where an injection replaces the text
a task needs (banking's bill), the script still pays the right account, so a defense can
score a higher utility under attack than without.

Defenses (``--defense``, all of them by default):

- ``none``: Chapter 1's kernel, no gate.
- ``prompt``: Chapter 3's prompt-level defense: tool results in delimiters, and a system
  prompt telling the model to treat them as data.
- ``tools``: only the tools the request needs. Which ones is read from the user task's
  ground truth: an oracle tool picker, the best case for this defense's utility.
- ``plan``: plan-then-execute with Chapter 3's ``run_planned``. The plan is written from the
  request alone, before any tool runs, so it may hold only what the request gives: a
  ground-truth step goes in when every argument value is stated in the request (a string
  the request contains, a number it writes) or is the function's default. A step that
  needs a value from data (the account named in a bill, the body of a message that sums
  up a channel) cannot be planned, so it is left out and the task fails. No model proposes
  anything once the plan is fixed; the answer is the ground truth's only when the plan held
  every step, since otherwise the facts it reports come from steps that never ran.
- ``plan_open``: the same plan, but the model stays in the loop to fill the values the plan
  leaves open. A gate lets through only the plan's next tool, with the values the request
  states; the sequence of tools again comes from the ground truth (an oracle planner).
  Injected text can add no call, but it can steer an open argument of a planned call.
- ``provenance``: Chapter 3's ``ProvenancePolicy``, denying: the request is the trusted text,
  every tool result is untrusted, and an effectful call carrying a value first seen in
  untrusted output is refused.
- ``tenant`` is not offered: none of AgentDojo's suites has principals to scope (each
  environment belongs to one user), and asking for it says so.

Which tools are effectful is not written down by AgentDojo, so it is measured, the same way
for every suite: a function is effectful if running it in some ground truth (of a user or an
injection task) changed the environment, or if no ground truth calls it (unknown, so assumed
to write). Reading a web page in the slack suite logs the request, so it counts as an effect:
a request can carry data out.

The JSON (``--json``) has ``suite``, ``agentdojo`` (its version), ``benchmark_version`` and
``results``, one row per run: ``defense``, ``model`` (``ground_truth`` or ``obedient``),
``user_task``, ``injection_task`` (null without attack), ``utility`` and
``attack_succeeded`` (null without attack). With the ``none`` defense it also checks
faithfulness: every user task that AgentDojo's ``GroundTruthPipeline`` solves must be solved
here by the ground-truth model, and any that is not is printed with both verdicts.

Importing this module imports agentdojo (several seconds); ``import agentbook`` never does.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.agent_pipeline.ground_truth_pipeline import GroundTruthPipeline
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.attacks.attack_registry import load_attack
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.functions_runtime import (Function, FunctionCall, FunctionsRuntime,
                                         TaskEnvironment)
from agentdojo.task_suite.load_suites import get_suites
from agentdojo.task_suite.task_suite import TaskSuite
from agentdojo.types import (ChatAssistantMessage, ChatMessage, ChatToolResultMessage,
                             text_content_block_from_string)

from agentbook import (PROMPT_DEFENSE, SYSTEM_PROMPT, Limits, Observation, ProvenancePolicy,
                       RunResult, ScriptedModel, ToolCall, ToolSpec, allow_all,
                       answer_message, filter_tools, obedient_model, parse_tool_calls,
                       run_agent, run_planned, spotlight_tools, tool_call_message)

# The newest benchmark version of the pinned agentdojo; passed to get_suites as it is.
BENCHMARK_VERSION = "v1.2.2"
# AgentDojo's "important_instructions" attacks address the victim model by its product name,
# which a scripted model does not have; this one from the same attack set needs no name.
ATTACK = "ignore_previous"
DEFENSES = ("none", "prompt", "tools", "plan", "plan_open", "provenance")
NOT_OFFERED = {"tenant": "no AgentDojo suite has principals to scope: each environment "
                         "belongs to one user"}
JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool,
              "array": list, "object": dict}
# Budgets: a ground truth is a handful of calls, and tool results (a mailbox, a channel
# history) can be long; the runs here measure gates, not budgets.
SPARE_TURNS = 4  # beyond the plan, the one obeyed message and the answer
PROMPT_TOKENS = 1_000_000


def agentdojo_version() -> str:
    return metadata.version("agentdojo")


def load_suite(name: str, benchmark_version: str = BENCHMARK_VERSION) -> TaskSuite[Any]:
    """AgentDojo's suite ``name`` of ``benchmark_version``, or a clear error."""
    suites = get_suites(benchmark_version)
    if not suites:
        raise SystemExit(f"agentdojo {agentdojo_version()} has no benchmark version "
                         f"{benchmark_version!r}")
    if name not in suites:
        raise SystemExit(f"no suite {name!r} in AgentDojo {benchmark_version}; "
                         f"choose from {', '.join(sorted(suites))}")
    return suites[name]


# --- AgentDojo's functions as the book's tools -------------------------------------------

def book_type(schema: dict[str, Any], definitions: dict[str, Any]) -> type:
    """The book's type for one parameter's JSON Schema.

    A scalar, array or object type maps to its Python type. A ``$ref`` (an enum such as
    workspace's sharing permission) maps to its target's type; the enum's values are left to
    AgentDojo's own check when the call runs. A union (``anyOf``, in AgentDojo always "T or
    null") has no type in the book's contract, whose values are never null: it maps to
    ``object``, so the kernel checks nothing about it and AgentDojo's check does. One thing
    is lost there: the kernel refuses ``true`` or ``false`` for any type but ``bool``, so a
    "boolean or null" parameter cannot be given a boolean through the book's kernel (no
    ground truth in the pinned suites does).
    """
    if "$ref" in schema:
        schema = definitions[schema["$ref"].rsplit("/", 1)[-1]]
    kind = schema.get("type")
    if isinstance(kind, str) and kind in JSON_TYPES:
        return JSON_TYPES[kind]
    return object


def tool_contract(function: Function) -> tuple[dict[str, type], dict[str, Any]]:
    """The book's schema for an AgentDojo function, and its parameters' defaults.

    The book's contract has no optional fields: a call must give exactly the declared
    arguments. So every parameter is declared, and a parameter that AgentDojo lets a call
    omit is given its JSON Schema default by the scripted models (``complete_call``).
    """
    schema = function.parameters.model_json_schema()
    definitions = schema.get("$defs", {})
    properties = schema.get("properties", {})
    contract = {name: book_type(spec, definitions) for name, spec in properties.items()}
    defaults = {name: spec["default"] for name, spec in properties.items()
                if "default" in spec}
    return contract, defaults


def unfolded_yaml(data: Any) -> str:
    """AgentDojo's YAML for a tool result, without folding long lines.

    AgentDojo's default formatter folds a string longer than a line across lines. A value
    copied out of such a result then no longer appears in it as written, and the provenance
    defense, which looks for whole values, would miss it: the fold, not the policy, would
    decide. Unfolded, every value appears in the result exactly as a call would carry it.
    """
    return yaml.safe_dump(data, width=math.inf)


class Environment:
    """One run's AgentDojo environment and runtime, reached by the tools' handlers."""

    def __init__(self, runtime: FunctionsRuntime, env: TaskEnvironment) -> None:
        self.runtime = runtime
        self.env = env

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run an AgentDojo function; its result as AgentDojo shows it to a model.

        AgentDojo reports any exception a function raises to the model as text. The kernel
        reports a handler's ValueError as an ``error`` observation, so every failure is
        turned into one: the loop carries on, as AgentDojo's would.
        """
        result, error = self.runtime.run_function(self.env, name, arguments)
        if error is not None:
            raise ValueError(error)
        try:
            return tool_result_to_str(result, dump_fn=unfolded_yaml)
        except TypeError as failure:  # a result AgentDojo's formatter cannot show
            raise ValueError(f"{name} returned what cannot be shown: {failure}") from failure


def book_tools(suite: TaskSuite[Any], environment: Environment,
               effectful: set[str]) -> dict[str, ToolSpec]:
    """Every function of the suite as a ToolSpec whose handler runs it in ``environment``."""
    tools = {}
    for function in suite.tools:
        contract, _ = tool_contract(function)

        def handler(_name: str = function.name, **arguments: Any) -> str:
            return environment.call(_name, arguments)

        tools[function.name] = ToolSpec(function.description, contract, handler,
                                        effectful=function.name in effectful)
    return tools


def complete_call(call: FunctionCall, defaults: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A ground-truth call as a plan step, omitted optional arguments given their default."""
    arguments = {**defaults.get(call.function, {}), **dict(call.args)}
    return {"tool": call.function, "arguments": arguments}


def suite_defaults(suite: TaskSuite[Any]) -> dict[str, dict[str, Any]]:
    return {function.name: tool_contract(function)[1] for function in suite.tools}


def fresh_environment(suite: TaskSuite[Any], task: BaseUserTask[Any] | BaseInjectionTask[Any],
                      injections: dict[str, str] | None = None) -> TaskEnvironment:
    environment = suite.load_and_inject_default_environment(injections or {})
    if isinstance(task, BaseUserTask):
        environment = task.init_environment(environment)
    return environment


def effectful_functions(suite: TaskSuite[Any]) -> set[str]:
    """The functions measured to write (see the module's docstring)."""
    runtime = FunctionsRuntime(suite.tools)
    called: set[str] = set()
    writers: set[str] = set()
    for task in [*suite.user_tasks.values(), *suite.injection_tasks.values()]:
        environment = fresh_environment(suite, task)
        for call in task.ground_truth(environment.model_copy(deep=True)):
            before = environment.model_dump()
            runtime.run_function(environment, call.function, call.args)
            called.add(call.function)
            if environment.model_dump() != before:
                writers.add(call.function)
    return writers | {function.name for function in suite.tools} - called


# --- The two models -------------------------------------------------------------------------

def ground_truth_model(plan: list[dict[str, Any]], answer: str) -> ScriptedModel:
    """Proposes the plan's calls, one a turn, then gives ``answer``: no attack, no defense."""
    turns = [tool_call_message(f"gt-{index}", step["tool"], step["arguments"])
             for index, step in enumerate(plan)]
    return ScriptedModel([*turns, answer_message(answer)])


def _plain_letters(text: str) -> str:
    """Only the letters and digits of ``text``, lower-cased.

    A tool result reaches the model as AgentDojo's YAML inside the kernel's JSON message,
    which may wrap, quote and escape the injected goal; its letters stay in order.
    """
    return re.sub(r"[^0-9a-z]", "", re.sub(r"\\(u[0-9a-fA-F]{4}|.)", " ", text).lower())


def instruction_finder(goal: str, steps: list[dict[str, Any]]
                       ) -> Callable[[str], list[dict[str, Any]] | None]:
    """What the obedient model obeys: the injection task's calls, where its goal is read.

    It obeys once a run, at the first tool result that carries the goal. Obeying every
    result that repeats it would only repeat the same calls, and an injection task that
    reads injected text itself would have the model obey its own results until the turns
    ran out.
    """
    needle = _plain_letters(goal)
    obeyed: list[bool] = []  # the model asks again only about results it has not obeyed

    def find_instruction(text: str) -> list[dict[str, Any]] | None:
        if obeyed or not needle or needle not in _plain_letters(str(text)):
            return None
        obeyed.append(True)
        return steps

    return find_instruction


# --- Defenses -------------------------------------------------------------------------------

def _numbers(text: str) -> set[float]:
    return {float(number.replace(",", ""))
            for number in re.findall(r"\d+(?:,\d{3})*(?:\.\d+)?", text)}


def stated(value: Any, request: str) -> bool:
    """Whether the request itself states ``value``, so a planner could know it in advance."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, str):
        return len(value.strip()) > 1 and value.lower() in request.lower()
    if isinstance(value, int | float):
        return float(value) in _numbers(request)
    if isinstance(value, list):
        return bool(value) and all(stated(item, request) for item in value)
    return False


def fixed_plan(plan: list[dict[str, Any]], request: str) -> list[dict[str, Any]]:
    """The plan a planner could write from the request alone: tools, and stated values."""
    return [{"tool": step["tool"],
             "arguments": {name: value for name, value in step["arguments"].items()
                           if stated(value, request)}}
            for step in plan]


def plannable(plan: list[dict[str, Any]], request: str,
              defaults: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps whose every argument the request states or leaves at its default."""
    missing = object()
    return [step for step in plan
            if all(stated(value, request)
                   or defaults.get(step["tool"], {}).get(name, missing) == value
                   for name, value in step["arguments"].items())]


class PlanGate:
    """Allow only the plan's next step, with the argument values the plan fixed."""

    def __init__(self, plan: list[dict[str, Any]]) -> None:
        self.plan = plan
        self.done = 0

    def __call__(self, call: ToolCall) -> tuple[bool, str]:
        if self.done >= len(self.plan):
            return False, "the plan is complete: no further calls"
        step = self.plan[self.done]
        if call.name != step["tool"]:
            return False, f"not in the plan: the next step is {step['tool']}"
        arguments = call.arguments or {}
        for name, value in step["arguments"].items():
            if arguments.get(name) != value:
                return False, f"the plan fixed {name} to {value!r}"
        self.done += 1
        return True, f"step {self.done} of the plan"


@dataclass(frozen=True)
class Defended:
    """What one defense runs the kernel with."""

    tools: dict[str, ToolSpec]
    gate: Callable[[ToolCall], tuple[bool, str]]
    system_prompt: str = SYSTEM_PROMPT


def defend(defense: str, tools: dict[str, ToolSpec], plan: list[dict[str, Any]],
           request: str) -> Defended:
    """The tools, gate and system prompt of a defense that runs the model in the loop."""
    if defense == "none":
        return Defended(tools, allow_all)
    if defense == "prompt":
        return Defended(spotlight_tools(tools), allow_all,
                        f"{SYSTEM_PROMPT}\n\n{PROMPT_DEFENSE}")
    if defense == "tools":
        return Defended(filter_tools(tools, dict.fromkeys(s["tool"] for s in plan)), allow_all)
    if defense == "plan_open":
        return Defended(tools, PlanGate(fixed_plan(plan, request)))
    if defense == "provenance":
        policy = ProvenancePolicy([request], on_untrusted="deny")
        return Defended(policy.wrap(tools), policy)
    raise ValueError(f"unknown defense: {defense}")


# --- Runs, through AgentDojo's own runner and checks ---------------------------------------

@dataclass(frozen=True)
class Benchmark:
    """A loaded suite and what every run of it shares."""

    suite: TaskSuite[Any]
    effectful: set[str]
    defaults: dict[str, dict[str, Any]]

    @classmethod
    def load(cls, name: str, benchmark_version: str = BENCHMARK_VERSION) -> Benchmark:
        suite = load_suite(name, benchmark_version)
        return cls(suite, effectful_functions(suite), suite_defaults(suite))

    def plan(self, task: BaseUserTask[Any] | BaseInjectionTask[Any],
             environment: TaskEnvironment) -> list[dict[str, Any]]:
        return [complete_call(call, self.defaults) for call in task.ground_truth(environment)]


def proposals_of(result: RunResult) -> list[ToolCall]:
    """Every call the model proposed in a run, in order; each has one observation."""
    return [call for message in result.state.messages if message.get("role") == "assistant"
            for call in parse_tool_calls(message)]


def executed_messages(calls: Sequence[ToolCall], observations: Sequence[Observation],
                      answer: str | None) -> list[ChatMessage]:
    """A run as AgentDojo messages: the calls the kernel executed, then the answer."""
    messages: list[ChatMessage] = []
    for call, observation in zip(calls, observations, strict=False):
        if observation.kind not in ("result", "error"):
            continue  # refused before it reached the environment
        executed = FunctionCall(function=call.name, args=call.arguments or {},
                                id=call.call_id)
        text = str(observation.content)
        messages.append(ChatAssistantMessage(role="assistant", content=None,
                                             tool_calls=[executed]))
        messages.append(ChatToolResultMessage(
            role="tool", content=[text_content_block_from_string(text)], tool_call=executed,
            tool_call_id=call.call_id, error=None if observation.ok else text))
    final = text_content_block_from_string(answer or "")
    messages.append(ChatAssistantMessage(role="assistant", content=[final], tool_calls=None))
    return messages


class BookKernel(BasePipelineElement):
    """An AgentDojo pipeline that runs this book's kernel with a scripted model."""

    name = "agentbook kernel"

    def __init__(self, benchmark: Benchmark, defense: str, user_task: BaseUserTask[Any],
                 injection_task: BaseInjectionTask[Any] | None) -> None:
        self.benchmark = benchmark
        self.defense = defense
        self.user_task = user_task
        self.injection_task = injection_task

    def model(self, plan: list[dict[str, Any]], env: TaskEnvironment) -> Any:
        answer = self.user_task.GROUND_TRUTH_OUTPUT
        if self.injection_task is None:
            return ground_truth_model(plan, answer)
        steps = self.benchmark.plan(self.injection_task, env)
        return obedient_model(plan, answer,
                              instruction_finder(self.injection_task.GOAL, steps))

    def run_loop(self, request: str, plan: list[dict[str, Any]], tools: dict[str, ToolSpec],
                 env: TaskEnvironment) -> list[ChatMessage]:
        """Chapter 1's loop, with the model in it, under the defense."""
        defended = defend(self.defense, tools, plan, request)
        limits = Limits(max_turns=len(plan) + 2 + SPARE_TURNS,
                        max_prompt_tokens=PROMPT_TOKENS)
        result = run_agent(request, self.model(plan, env), defended.tools, defended.gate,
                           limits, system_prompt=defended.system_prompt)
        return executed_messages(proposals_of(result), result.state.observations,
                                 result.answer)

    def run_plan(self, request: str, plan: list[dict[str, Any]],
                 tools: dict[str, ToolSpec]) -> list[ChatMessage]:
        """Plan-then-execute: only the steps a planner could write from the request.

        No model proposes anything once the plan is fixed, so injected text can change
        nothing that runs. The answer is the ground truth's only when the plan held every
        step; otherwise the facts it reports come from steps that never ran.
        """
        steps = plannable(plan, request, self.benchmark.defaults)
        observations, _ = run_planned(steps, tools, allow_all)
        calls = [ToolCall(f"s{index}", step["tool"], step["arguments"])
                 for index, step in enumerate(steps)]
        complete = len(steps) == len(plan) and all(o.ok for o in observations)
        return executed_messages(calls, observations,
                                 self.user_task.GROUND_TRUTH_OUTPUT if complete else "")

    def query(self, query: str, runtime: FunctionsRuntime, env: Any = None,
              messages: Sequence[ChatMessage] = (), extra_args: dict[str, Any] | None = None
              ) -> tuple[str, FunctionsRuntime, Any, Sequence[ChatMessage], dict[str, Any]]:
        plan = self.benchmark.plan(self.user_task, env)
        tools = book_tools(self.benchmark.suite, Environment(runtime, env),
                           self.benchmark.effectful)
        run = (self.run_plan(query, plan, tools) if self.defense == "plan"
               else self.run_loop(query, plan, tools, env))
        return query, runtime, env, [*messages, *run], extra_args or {}


def task_order(task_id: str) -> tuple[str, int]:
    """Sort ``user_task_10`` after ``user_task_9``."""
    prefix, _, number = task_id.rpartition("_")
    return prefix, int(number) if number.isdigit() else -1


def row(defense: str, user_task: str, injection_task: str | None, utility: bool,
        attack_succeeded: bool | None) -> dict[str, Any]:
    return {"defense": defense,
            "model": "ground_truth" if injection_task is None else "obedient",
            "user_task": user_task, "injection_task": injection_task,
            "utility": utility, "attack_succeeded": attack_succeeded}


def run_one(benchmark: Benchmark, defense: str, user_task_id: str,
            injection_task_id: str | None, injections: dict[str, str],
            environment: TaskEnvironment) -> dict[str, Any]:
    """One run of the kernel, scored by AgentDojo's own checks; its result row.

    ``environment`` is the suite's, loaded with ``injections``; the run changes it.
    """
    suite = benchmark.suite
    user_task = suite.user_tasks[user_task_id]
    injection_task = (suite.injection_tasks[injection_task_id]
                      if injection_task_id is not None else None)
    kernel = BookKernel(benchmark, defense, user_task, injection_task)
    utility, security = suite.run_task_with_pipeline(kernel, user_task, injection_task,
                                                     injections, environment=environment)
    return row(defense, user_task_id, injection_task_id, bool(utility),
               bool(security) if injection_task else None)


def pairs(suite: TaskSuite[Any]) -> Iterator[tuple[str, str | None]]:
    """Every user task alone, then with every injection task, in the suite's order."""
    injection_ids = sorted(suite.injection_tasks, key=task_order)
    for user_task_id in sorted(suite.user_tasks, key=task_order):
        yield user_task_id, None
        for injection_task_id in injection_ids:
            yield user_task_id, injection_task_id


def make_attack(benchmark: Benchmark) -> Any:
    return load_attack(ATTACK, benchmark.suite, GroundTruthPipeline(None))


def run_benchmark(benchmark: Benchmark, defenses: Sequence[str],
                  only: Sequence[tuple[str, str | None]] | None = None
                  ) -> list[dict[str, Any]]:
    """Result rows for every defense and pair (or only the pairs in ``only``).

    Each pair's environment is loaded once (parsing AgentDojo's YAML is most of the time)
    and every defense runs on a deep copy of it, as AgentDojo's own suite check does.
    """
    suite = benchmark.suite
    attack = make_attack(benchmark)
    chosen = list(only) if only is not None else list(pairs(suite))
    rows = {}
    for user_task_id, injection_task_id in chosen:
        injections = (attack.attack(suite.user_tasks[user_task_id],
                                    suite.injection_tasks[injection_task_id])
                      if injection_task_id is not None else {})
        loaded = suite.load_and_inject_default_environment(injections)
        for defense in defenses:
            rows[defense, user_task_id, injection_task_id] = run_one(
                benchmark, defense, user_task_id, injection_task_id, injections,
                loaded.model_copy(deep=True))
    return [rows[defense, user_task, injection_task] for defense in defenses
            for user_task, injection_task in chosen]


def faithfulness(benchmark: Benchmark, rows: list[dict[str, Any]]
                 ) -> list[tuple[str, bool, bool]]:
    """User tasks where AgentDojo's GroundTruthPipeline and the kernel's verdicts differ."""
    suite = benchmark.suite
    ours = {r["user_task"]: r["utility"] for r in rows
            if r["defense"] == "none" and r["model"] == "ground_truth"}
    differences = []
    for task_id in sorted(ours, key=task_order):
        task = suite.user_tasks[task_id]
        theirs, _ = suite.run_task_with_pipeline(GroundTruthPipeline(task), task, None, {})
        if bool(theirs) != ours[task_id]:
            differences.append((task_id, bool(theirs), ours[task_id]))
    return differences


# --- The table and the JSON -----------------------------------------------------------------

def _rate(values: list[bool]) -> str:
    return f"{100 * sum(values) / len(values):5.1f}%" if values else "    -"


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per defense: utility without attack, utility under attack, attack success rate."""
    table = []
    for defense in dict.fromkeys(r["defense"] for r in rows):
        mine = [r for r in rows if r["defense"] == defense]
        clean = [r for r in mine if r["model"] == "ground_truth"]
        attacked = [r for r in mine if r["model"] == "obedient"]
        table.append({
            "defense": defense,
            "utility": [r["utility"] for r in clean],
            "utility_under_attack": [r["utility"] for r in attacked],
            "attack_succeeded": [r["attack_succeeded"] for r in attacked],
            "tasks_lost": [r["user_task"] for r in clean if not r["utility"]],
        })
    return table


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'defense':<12}{'utility':>9}{'under attack':>14}{'attack success':>16}"]
    for entry in summary(rows):
        lines.append(f"{entry['defense']:<12}{_rate(entry['utility']):>9}"
                     f"{_rate(entry['utility_under_attack']):>14}"
                     f"{_rate(entry['attack_succeeded']):>16}")
    for entry in summary(rows):
        if entry["tasks_lost"]:
            lost = ", ".join(task.removeprefix("user_task_") for task in entry["tasks_lost"])
            lines += textwrap.wrap(f"{entry['defense']} loses user tasks {lost}", 79,
                                   subsequent_indent="  ")
    return lines


def results_document(suite: str, benchmark_version: str,
                     rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"suite": suite, "agentdojo": agentdojo_version(),
            "benchmark_version": benchmark_version, "results": rows}


def results_json(document: dict[str, Any]) -> str:
    """The document as JSON with one result row a line, so that a diff shows which runs moved."""
    head = {key: value for key, value in document.items() if key != "results"}
    lines = [json.dumps(head)[:-1] + ', "results": [']
    rows = [json.dumps(result) for result in document["results"]]
    lines += [f"  {text}," for text in rows[:-1]] + [f"  {text}" for text in rows[-1:]]
    return "\n".join([*lines, "]}"]) + "\n"


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write whole or not at all: a reader never meets half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of its own in the same folder: two runs at once never share a half-written file,
    # and the rename that publishes it is atomic.
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.",
                                     delete=False) as partial:
        written = Path(partial.name)
        try:
            partial.write(results_json(document))
        except BaseException:
            written.unlink()
            raise
    written.chmod(0o644)  # a temporary file is private; the results are not
    written.replace(path)


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scripts.checks.injection",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", required=True, help="an AgentDojo suite, e.g. banking")
    parser.add_argument("--defense", action="append", metavar="D",
                        help=f"one of {', '.join(DEFENSES)}; repeat for several "
                             "(default: all)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every run's row here")
    parser.add_argument("--benchmark-version", default=BENCHMARK_VERSION,
                        help=f"given to AgentDojo's get_suites (default {BENCHMARK_VERSION})")
    arguments = parser.parse_args(argv)
    if arguments.json is not None and arguments.json.is_dir():
        parser.error(f"--json {arguments.json} is a folder; give a file name")
    for defense in arguments.defense or ():
        if defense in NOT_OFFERED:
            parser.error(f"defense {defense!r} is not offered: {NOT_OFFERED[defense]}")
        if defense not in DEFENSES:
            parser.error(f"unknown defense {defense!r}; choose from {', '.join(DEFENSES)}")
    arguments.defense = list(dict.fromkeys(arguments.defense or DEFENSES))
    return arguments


def main(argv: Sequence[str]) -> int:
    arguments = parse_arguments(argv)
    benchmark = Benchmark.load(arguments.suite, arguments.benchmark_version)
    suite = benchmark.suite
    print(f"AgentDojo {arguments.benchmark_version} suite {arguments.suite} (agentdojo "
          f"{agentdojo_version()}), attack {ATTACK}:\n{len(suite.user_tasks)} user tasks, "
          f"{len(suite.injection_tasks)} injection tasks", flush=True)
    rows = run_benchmark(benchmark, arguments.defense)
    print("\n".join(table_lines(rows)))
    if arguments.json is not None:
        write_json(arguments.json, results_document(arguments.suite,
                                                    arguments.benchmark_version, rows))
    if "none" not in arguments.defense:
        return 0
    differences = faithfulness(benchmark, rows)
    for task_id, theirs, ours in differences:
        print(f"unfaithful: {task_id}: GroundTruthPipeline utility {theirs}, kernel {ours}")
    if not differences:
        solved = sum(r["utility"] for r in rows
                     if r["defense"] == "none" and r["model"] == "ground_truth")
        print(f"faithful: on all {len(suite.user_tasks)} user tasks the kernel's utility is "
              f"GroundTruthPipeline's\n({solved} solved by both)")
    return 1 if differences else 0


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        sys.exit(main(sys.argv[1:]))
