"""Countdown: reach a target from given numbers with + - * /, each number used exactly once.

The arithmetic task of the ES-at-scale paper (via TinyZero), here so that training can run end
to end without Lean. Problems are generated offline from a seed and are solvable by
construction (the target is the value of a random expression over the numbers). A problem's
split is a function of its content (numbers as a multiset, and target), not of the seed or its
position: the same problem is `valid` in every generated set, so a warm-start that trains only on
`train` problems (prover_cli/policy/warmstart.py) never sees a held-out one. Answers are
checked exactly: the expression is parsed with `ast` (numbers, + - * /, parentheses only),
evaluated with `Fraction` (so 7/2*2 is exactly 7, and division by zero is a wrong answer), and
the multiset of numbers used must equal the multiset given.

A config shapes the generated problems in the task's own table (`OPTIONS`, docs/config.md):

    [task.countdown]
    problems = 1024      # how many
    numbers = 3          # numbers per problem
    max_number = 9       # drawn from 1..max_number
    prompt = "short"     # `PROMPTS`
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import random
import re
import warnings
from collections import Counter
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from prover_cli.progress import Reporter
from prover_cli.tasks import Option, options_for, register_task

if TYPE_CHECKING:
    from prover_cli.config import Config

NAME = "countdown"

PROMPT = (
    "Using the numbers {numbers}, create an equation that equals {target}. You can use basic "
    "arithmetic operations (+, -, *, /) and each number can only be used once. Show your work in "
    "<think> </think> tags. And return the final answer in <answer> </answer> tags, for example "
    "<answer> (1 + 2) / 3 </answer>."
)
# `task.countdown.prompt`: `tinyzero` is the paper's prompt above (~185 tokens with the tiny
# model's tokenizer); `short` keeps its first sentence and the answer format (~50 tokens), which
# the tiny CPU model can learn to read in a short warm-start (prover_cli/policy/warmstart.py).
PROMPTS = {
    "tinyzero": PROMPT,
    "short": "Using the numbers {numbers}, create an equation that equals {target}. Answer in <answer> </answer> tags.",
}
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPS: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}
# The options a config sets in `[task.countdown]` (`--set task.countdown.problems=...`).
OPTIONS = {
    "problems": Option(512, "Problems to generate.", min=1),
    "numbers": Option(3, "How many numbers each problem gives.", min=2, max=6),
    "max_number": Option(20, "Numbers are drawn from 1..this.", min=2),
    "prompt": Option("tinyzero", "The prompt: `tinyzero` (the ES-at-scale paper's) or `short` (its first sentence and "
                     "the answer format; what the `tiny-countdown` base model was warm-started on).",
                     choices=tuple(PROMPTS)),
}
# The keys these options were before they moved into the task's table: a config naming one is refused.
RENAMED = {f"data.countdown_{option}": option for option in OPTIONS}


def generate_problems(count: int, numbers_per_problem: int, max_number: int, seed: int,
                      prompt: str = "tinyzero") -> list[dict[str, Any]]:
    """`count` solvable problems, a pure function of the arguments.

    A `prompt` other than `tinyzero` is stored in each problem as `prompt_style`, so the
    problems file says how its problems are asked (and the ledger's problems hash covers it)."""
    if prompt not in PROMPTS:
        raise ValueError(f"countdown prompt {prompt!r}: not one of {', '.join(PROMPTS)}")
    rng = random.Random(f"countdown:{seed}")
    problems: list[dict[str, Any]] = []
    while len(problems) < count:
        numbers = [rng.randint(1, max_number) for _ in range(numbers_per_problem)]
        value = _random_value(numbers, rng)
        if value is None or value.denominator != 1 or value <= 0:
            continue  # keep targets positive integers, as in the paper's data
        index = len(problems)
        rng.random()  # formerly drew the split; kept so every seed still yields the same problems
        problems.append({
            "id": f"countdown_{seed}_{index:05d}",
            "numbers": numbers,
            "target": int(value),
            "split": content_split(numbers, int(value)),
            "source": f"countdown(seed={seed})",
            **({"prompt_style": prompt} if prompt != "tinyzero" else {}),
        })
    return problems


VALID_FRACTION = 0.1  # of the problem space held out, by content


def content_split(numbers: Sequence[int], target: int) -> str:
    """`valid` for a fixed ~10% of all (number multiset, target) pairs, else `train`."""
    key = f"countdown-split|{sorted(int(n) for n in numbers)}|{int(target)}".encode()
    fraction = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64
    return "valid" if fraction < VALID_FRACTION else "train"


def _random_value(numbers: list[int], rng: random.Random) -> Fraction | None:
    values = [Fraction(n) for n in numbers]
    rng.shuffle(values)
    while len(values) > 1:
        a, b = values.pop(), values.pop()
        op = rng.choice("+-*/")
        if op == "/" and b == 0:
            return None
        values.append({"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else a}[op])
    return values[0]


def solve(numbers: Sequence[int], target: int) -> str | None:
    """The first expression (in a fixed order) that uses `numbers` once each and equals `target`.

    Order: numbers as given before permutations of them, left-nested `(a op b) op c` before
    other shapes, and + - * / in that order; so the solution of a problem is unique and
    simple, which makes it a consistent target for the supervised warm-start."""
    for order in dict.fromkeys(itertools.permutations(int(n) for n in numbers)):
        for text, value in _expressions(list(order)):
            if value == target:
                return text
    return None


def _expressions(numbers: list[int]) -> Iterator[tuple[str, Fraction]]:
    """(text, exact value) of every expression over `numbers` in this order, left-nested first."""
    if len(numbers) == 1:
        yield str(numbers[0]), Fraction(numbers[0])
        return
    for split in range(len(numbers) - 1, 0, -1):  # split at the end first: ((a op b) op c) op d
        for left_text, left in _expressions(numbers[:split]):
            for right_text, right in _expressions(numbers[split:]):
                for op in "+-*/":
                    if op == "/" and right == 0:
                        continue
                    value = {"+": left + right, "-": left - right, "*": left * right,
                             "/": left / right if right else left}[op]
                    lt = f"({left_text})" if split > 1 else left_text
                    rt = f"({right_text})" if len(numbers) - split > 1 else right_text
                    yield f"{lt} {op} {rt}", value


def extract_answer(completion: str) -> str | None:
    """The last <answer>...</answer> in the completion, stripped, or None."""
    found = _ANSWER.findall(completion)
    return found[-1].strip() if found else None


def check_answer(expression: str, numbers: Sequence[int], target: int) -> bool:
    """True only if `expression` uses exactly `numbers` once each and equals `target` exactly."""
    if len(expression) > 200:
        return False
    try:
        with warnings.catch_warnings():  # "7 + 1or 8" would print a SyntaxWarning per completion to the run's stderr
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError):
        return False
    used: list[int] = []
    try:
        value = _evaluate(tree.body, used)
    except (ZeroDivisionError, _Rejected):
        return False
    return Counter(used) == Counter(int(n) for n in numbers) and value == target


class _Rejected(Exception):
    pass


def _evaluate(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left, used), _evaluate(node.right, used))
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    raise _Rejected  # names, calls, unary minus, floats, powers...: not allowed


def completion_reward(completion: str, problem: dict[str, Any]) -> float:
    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    return 1.0 if check_answer(answer, problem["numbers"], problem["target"]) else 0.0


def content_key(problem: dict[str, Any]) -> str | None:
    """A puzzle's numbers as a multiset and its target (the order they are listed in changes
    nothing to solve); None for a row that is no countdown puzzle."""
    if isinstance(problem.get("numbers"), list) and "target" in problem:
        return "countdown|" + json.dumps([sorted(map(str, problem["numbers"])), str(problem["target"])])
    return None


@register_task(NAME)
class CountdownTask:
    name = NAME
    problem_fields = {"numbers": ("ints", True), "target": (int, True), "prompt_style": (str, False)}
    reward_range = (0.0, 1.0)
    options = OPTIONS
    renamed = RENAMED

    def problems_from_seed(self, config: Config, count: int) -> list[dict[str, Any]]:
        """`count` problems (0: task.countdown.problems) shaped by the task's options, from run.seed."""
        option = options_for(config, self.name)
        return generate_problems(count or option["problems"], option["numbers"], option["max_number"],
                                 seed=config.run.seed, prompt=option["prompt"])

    def content_key(self, problem: dict[str, Any]) -> str | None:
        return content_key(problem)

    def problem_defect(self, problem: dict[str, Any]) -> str | None:
        style = problem.get("prompt_style")
        if style is not None and style not in PROMPTS:
            return f"`prompt_style` {style!r} is not one of {', '.join(PROMPTS)}"
        return None

    def build_prompt(self, problem: dict[str, Any], tokenizer: Any, family: str) -> str:
        style = problem.get("prompt_style", "tinyzero")
        if style not in PROMPTS:
            raise ValueError(f"countdown problem {problem.get('id')!r}: prompt_style {style!r} is not one of "
                             f"{', '.join(PROMPTS)}")
        text = PROMPTS[style].format(numbers=problem["numbers"], target=problem["target"])
        if tokenizer is not None and getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
        return text

    def rewards(self, problems: Sequence[dict[str, Any]], completions: Sequence[str], config: Config | None = None,
                reporter: Reporter | None = None) -> list[float]:
        return [completion_reward(c, p) for p, c in zip(problems, completions, strict=True)]
