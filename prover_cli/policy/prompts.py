"""Prompt templates by model family, and getting the Lean answer back out of a completion.

One place for every family, so `generate`, `eval`, ES and GRPO prompt a model the same way. Each
template is its upstream's own text, byte for byte where upstream publishes it (tests pin them):

| family | models | upstream source of the text | style |
|---|---|---|---|
| `deepseek-v1.5` | DeepSeek-Prover-V1.5 (non-CoT) | DeepSeek-Prover-V1.5 `prover/utils.py` `non_cot_prompt` | continuation |
| `deepseek-v1.5-cot` | DeepSeek-Prover-V1.5-SFT/-RL (the paper's mode) | same file, `cot_prompt` | continuation |
| `goedel-v1` | Goedel-Prover-SFT/-DPO | Goedel-Prover `eval/step1_inference.py` (the V1.5 CoT text) | continuation |
| `deepseek-v2` | DeepSeek-Prover-V2 (CoT) | DeepSeek-Prover-V2 README quick start | chat |
| `deepseek-v2-noncot` | DeepSeek-Prover-V2 (non-CoT) | DeepSeek-Prover-V2 paper, appendix A.1 | chat |
| `goedel-v2` | Goedel-Prover-V2 | Goedel-Prover-V2 `src/utils.py` `DeepSeekCoTHandler` | chat |
| `kimina-preview` | Kimina-Prover-Preview(-Distill) | the models' card quick start | chat |
| `kimina-prover` | Kimina-Prover(-Distill, -RL, 72B) | project-numina/kimina-prover-rl prompt set (`PROMPT`, `SYSTEM_PROMPT`) | chat |
| `plain` | base models, the tiny test model | ours: the statement alone | continuation |

`kimina` and `deepseek` (the names of earlier versions) are aliases of `kimina-preview` and
`deepseek-v1.5`. `auto` maps a model name to its family (`resolve_family`) and says which it
chose; a name it does not know falls back to `plain` with a warning that names the fallback.

Each family's default header (for rows that carry none, `family_header`) is the one its own
evaluation used: DeepSeek's `LEAN4_DEFAULT_HEADER` (`maxHeartbeats 0`, then a blank line) for
every published family (DeepSeek V1.5/V2, Goedel V1/V2 and the Kimina cards all use it);
`plain` has none of its own and uses `verify.header`.

Continuation families end the prompt inside an open ```lean4 fence and the model writes the
proof. The candidate we store is the trusted statement + the model's text up to its first
closing fence (DeepSeek's own `post_process_output` cut), wrapped in one complete block: only
the model's response is read, never the echoed prompt, so a fence inside a problem's informal
text cannot matter. The header is not repeated in it: verify runs the trusted header itself.

Decisions about extraction (chat families), since a proof checker trusts what this returns:
- Only ```lean4 and ```lean fences count; the *last complete* block is the answer (models draft
  and then restate). An unterminated block (output cut by max_tokens) is never an answer: it
  was not finished, and a truncated proof must not be completed by guesswork.
- Code inside `<think>...</think>` is reasoning, not the answer: only text after the last
  `</think>` is searched. A `<think>` that never closes means the model ran out of tokens while
  thinking: there is no answer (even if the thinking held a block). Text before a lone
  `</think>` (templates that open `<think>` in the prompt) is likewise reasoning.
- Nothing is synthesised: an informal statement is never turned into a Lean comment here (a
  `-/` inside it would end the comment and inject code); only a source's own `informal_prefix`
  (miniF2F's doc comments) is placed above the statement.
"""

from __future__ import annotations

import re
from typing import Any

from prover_cli.errors import BackendError, ConfigError
from prover_cli.progress import Reporter

FAMILIES = ("deepseek-v1.5", "deepseek-v1.5-cot", "deepseek-v2", "deepseek-v2-noncot", "goedel-v1", "goedel-v2",
            "kimina-preview", "kimina-prover", "plain")
ALIASES = {"kimina": "kimina-preview", "deepseek": "deepseek-v1.5"}
# Every value `model.family` accepts (config.py lists the same choices).
FAMILY_CHOICES = ("auto", *FAMILIES, *ALIASES)

# Families whose prompt ends inside an open ```lean4 fence: the model continues the code.
CONTINUATION_FAMILIES = ("deepseek-v1.5", "deepseek-v1.5-cot", "goedel-v1", "plain")
CHAT_FAMILIES = tuple(f for f in FAMILIES if f not in CONTINUATION_FAMILIES)

# DeepSeek-Prover-V1.5 `prover/utils.py`: LEAN4_DEFAULT_HEADER, also Goedel-Prover's, and the
# header of DeepSeek's miniF2F rows, the DeepSeek-Prover-V2 and Goedel-Prover-V2 cards.
DEEPSEEK_HEADER = "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 0\n\nopen BigOperators Real Nat Topology Rat\n\n"

# DeepSeek-Prover-V1.5 `prover/utils.py` (`non_cot_prompt`, `cot_prompt`); Goedel-Prover's
# `eval/step1_inference.py` uses the CoT text.
DEEPSEEK_INSTRUCTION = "Complete the following Lean 4 code:\n\n```lean4\n"
DEEPSEEK_COT_INSTRUCTION = ("Complete the following Lean 4 code with explanatory comments preceding each line of code:"
                            "\n\n```lean4\n")

# DeepSeek-Prover-V2 README quick start (CoT) and Goedel-Prover-V2 `src/utils.py`.
PROOF_PLAN_REQUEST = ("Before producing the Lean 4 code to formally prove the given theorem, provide a detailed proof "
                      "plan outlining the main proof steps and strategies.\nThe plan should highlight key ideas, "
                      "intermediate lemmas, and proof structures that will guide the construction of the final "
                      "formal proof.")

# Kimina-Prover Preview model card (AI-MO/Kimina-Prover-Preview-Distill-*), quick start.
KIMINA_SYSTEM = "You are an expert in mathematics and Lean 4."
KIMINA_INSTRUCTION = "Think about and solve the following problem step by step in Lean 4."

# project-numina/kimina-prover-rl (the Kimina-Prover training recipe): SYSTEM_PROMPT and PROMPT.
KIMINA_PROVER_SYSTEM = "You are an expert in mathematics and proving theorems in Lean 4."
KIMINA_PROVER_INSTRUCTION = "Think about and solve the following problems step by step in Lean 4."


# --------------------------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------------------------

# (substring of the lower-cased model name, family), first match wins: the specific names first.
_KNOWN_MODELS = (
    ("kimina-prover-preview", "kimina-preview"),
    ("kimina", "kimina-prover"),
    ("deepseek-prover-v2", "deepseek-v2"),
    ("deepseek-prover-v1.5-base", "deepseek-v1.5"),   # the base model: the paper prompts it non-CoT
    ("deepseek-prover-v1.5", "deepseek-v1.5-cot"),    # SFT/RL: the paper's numbers are CoT mode
    ("deepseek-prover", "deepseek-v1.5"),
    ("goedel-prover-v2", "goedel-v2"),
    ("goedel-prover", "goedel-v1"),
)
_QUIET_PLAIN = ("tiny",)  # our own test model: plain by design, nothing to warn about


def family_choice(model_name: str, family: str) -> tuple[str, str | None]:
    """(family, a sentence to show or None): `auto` says what it chose and why, or warns."""
    if family != "auto":
        family = ALIASES.get(family, family)
        if family not in FAMILIES:
            raise ConfigError(f"model.family = {family!r}: must be one of {', '.join(FAMILY_CHOICES)}")
        return family, None
    name = (model_name or "").lower()
    for needle, chosen in _KNOWN_MODELS:
        if needle in name:
            return chosen, f"model.family = auto: `{chosen}` prompts for {model_name!r}"
    if name.rstrip("/").rsplit("/", 1)[-1] in _QUIET_PLAIN:
        return "plain", None
    return "plain", (f"warning: model.family = auto does not know the model {model_name!r}; falling back to "
                     f"`plain` (the statement alone, continued). Set model.family to one of {', '.join(FAMILIES)}")


def resolve_family(model_name: str, family: str, reporter: Reporter | None = None, *, task: str = "lean") -> str:
    """The prompt family for `model_name`; `auto` logs its choice (or a warning) on `reporter`.

    Families are Lean prompts: for another `task` (countdown, toy: the task writes its own
    prompt) the family is still resolved, but there is nothing to say about it."""
    chosen, note = family_choice(model_name, family)
    if note and task == "lean" and reporter is not None and hasattr(reporter, "log"):
        reporter.log(note)
    return chosen


def family_header(family: str) -> str | None:
    """The header a family's own evaluation used, for rows without one (None: use verify.header)."""
    family = ALIASES.get(family, family)
    return None if family == "plain" else DEEPSEEK_HEADER


# --------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------

def build_prompt(problem: dict[str, Any], tokenizer: Any, family: str) -> str:
    """The text fed to the model for one Lean problem (`id`, `formal_statement`, `header`, ...).

    `family` may be `auto`: it is then resolved from the tokenizer's `name_or_path`.
    """
    family = resolve_family(getattr(tokenizer, "name_or_path", "") or "", family)
    if family in CHAT_FAMILIES:
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise BackendError(f"model.family = {family!r} needs a tokenizer with a chat template, and this one has none",
                               hint="set model.family = \"plain\" (or \"deepseek-v1.5\") for a base model")
        return tokenizer.apply_chat_template(chat_messages(problem, family), tokenize=False, add_generation_prompt=True)
    text = continuation_prompt(problem, family)
    # Completion-style prompts get no chat template, so nothing else adds the BOS token: the
    # samplers tokenize prompts with add_special_tokens=False (chat templates carry their own).
    bos = getattr(tokenizer, "bos_token", None)
    if isinstance(bos, str) and bos and not text.startswith(bos):
        text = bos + text
    return text


def continuation_prompt(problem: dict[str, Any], family: str) -> str:
    """The whole prompt of a continuation family (without BOS), as its upstream formats it."""
    family = ALIASES.get(family, family)
    if family == "deepseek-v1.5":
        return DEEPSEEK_INSTRUCTION + _code(problem)
    if family in ("deepseek-v1.5-cot", "goedel-v1"):
        return DEEPSEEK_COT_INSTRUCTION + _code(problem)
    if family == "plain":
        return problem["formal_statement"]
    raise ValueError(f"family {family!r} is not a continuation family")  # a bug in the caller


def chat_messages(problem: dict[str, Any], family: str) -> list[dict[str, str]]:
    """The chat messages of a chat family for one problem, as its upstream writes them."""
    family = ALIASES.get(family, family)
    if family == "kimina-preview":
        return kimina_messages(problem)
    if family == "kimina-prover":
        # The recipe's test set puts miniF2F's `informal_prefix` under `# Problem:`; its training
        # set the natural-language statement. We use the statement when a row has one.
        informal = problem.get("informal_statement") or problem.get("informal_prefix") or ""
        user = (f"{KIMINA_PROVER_INSTRUCTION}\n\n# Problem:\n{informal}\n\n# Formal Statement:\n```lean4\n"
                f"{_sorry_code(problem, newline=False)}\n```\n")
        return [{"role": "system", "content": KIMINA_PROVER_SYSTEM}, {"role": "user", "content": user}]
    if family == "deepseek-v2":
        # The card: the code with `:= by\n  sorry`, `.strip()`ed, inside a closed fence.
        user = f"{DEEPSEEK_INSTRUCTION}{_sorry_code(problem, newline=True).strip()}\n```\n\n{PROOF_PLAN_REQUEST}"
        return [{"role": "user", "content": user}]
    if family == "deepseek-v2-noncot":
        user = f"{DEEPSEEK_INSTRUCTION}{_sorry_code(problem, newline=True).strip()}\n```"
        return [{"role": "user", "content": user}]
    if family == "goedel-v2":
        # src/utils.py: lean4_code.split(":= by")[0] + ":= by sorry", then "{code}```" (no newline).
        user = f"{DEEPSEEK_INSTRUCTION}{_sorry_code(problem, newline=False)}```\n\n{PROOF_PLAN_REQUEST}"
        return [{"role": "user", "content": user}]
    raise ValueError(f"family {family!r} is not a chat family")  # a bug in the caller


def kimina_messages(problem: dict[str, Any]) -> list[dict[str, str]]:
    """System + user messages of the Kimina-Prover Preview card, for one problem.

    The card writes `# Problem:{problem}` with no space after the colon, and a formal statement
    that includes the header and the doc comment; both are kept exactly.
    """
    informal = problem.get("informal_statement") or ""
    user = (f"{KIMINA_INSTRUCTION}\n# Problem:{informal}"
            f"\n# Formal statement:\n```lean4\n{_code(problem)}\n```\n")
    return [{"role": "system", "content": KIMINA_SYSTEM}, {"role": "user", "content": user}]


def prompt_code(problem: dict[str, Any], family: str) -> str:
    """The Lean code a continuation prompt ends with (the model writes the proof after it)."""
    family = ALIASES.get(family, family)
    if family in ("deepseek-v1.5", "deepseek-v1.5-cot", "goedel-v1"):
        return _code(problem)
    if family == "plain":
        return problem["formal_statement"]
    raise ValueError(f"family {family!r} is not a continuation family")  # a bug in the caller


def _code(problem: dict[str, Any]) -> str:
    """header + informal prefix + statement, the way DeepSeek's `{header}{informal_prefix}{formal_statement}` joins them."""
    return _header(problem) + (problem.get("informal_prefix") or "") + problem["formal_statement"]


def _sorry_code(problem: dict[str, Any], *, newline: bool) -> str:
    """The code with the proof left as `sorry`: `:= by\\n  sorry` (DeepSeek-V2 card) or `:= by sorry`."""
    code = _code(problem).rstrip()
    return code + ("\n  sorry" if newline else " sorry")


def _header(problem: dict[str, Any]) -> str:
    header = problem.get("header") or ""
    return header if not header or header.endswith("\n") else header + "\n"


# --------------------------------------------------------------------------------------------
# Completions -> answers
# --------------------------------------------------------------------------------------------

def answer_completion(problem: dict[str, Any], completion: str, family: str) -> str:
    """What samples.jsonl stores as `completion`: text whose last ```lean4 block is the candidate.

    Chat families answer with a block themselves, so their text is kept unchanged. For
    continuation families the candidate is the trusted statement + the completion up to its
    first closing fence (the model closes the block it was continuing), wrapped in a complete
    block. Neither the header nor the informal prefix is echoed: only the response is read.
    """
    family = ALIASES.get(family, family)
    if family not in CONTINUATION_FAMILIES:
        return completion
    cut = completion.find("```")
    body = completion if cut < 0 else completion[:cut]
    code = problem["formal_statement"] + body
    return "```lean4\n" + code.rstrip() + "\n```\n"


_OPEN_FENCE = re.compile(r"```(?:lean4|lean)[ \t]*$")


def extract_lean_block(completion: str) -> str | None:
    """The code of the last complete ```lean4 / ```lean block outside `<think>`, or None.

    See the module docstring for the rules (think sections, unterminated blocks). Inside a block,
    a fence within a Lean block comment is comment text, not the block's end: a model that
    restates a problem whose doc comment holds ``` (MOBench Imo2008P2a/b) keeps its whole file.
    When a block's comments never close (random or cut-off text), fences count wherever they
    are, as before: that block is then unreadable to verify's lexer and rejected there.
    """
    text = _strip_thinking(completion)
    if text is None:
        return None
    aware, left_open = _last_block(text, comments=True)
    # A block left open by a comment that never closes: read the text as if comments did not
    # exist, so an earlier draft never stands in for the broken last answer.
    return _last_block(text, comments=False)[0] if left_open else aware


def _last_block(text: str, *, comments: bool) -> tuple[str | None, bool]:
    """(the last complete block, whether a block was still open at the end); with `comments`,
    fences inside Lean block comments do not close a block."""
    blocks: list[str] = []
    current: list[str] | None = None
    depth = 0  # Lean block-comment nesting inside the current block
    for line in text.split("\n"):
        if current is None:
            if _OPEN_FENCE.search(line.rstrip("\r")):
                current, depth = [], 0
            continue
        stripped = line.rstrip("\r").rstrip()
        if comments and depth > 0:
            current.append(line.rstrip("\r"))
            depth = _comment_depth_after(line, depth)
            continue
        if _OPEN_FENCE.match(stripped.lstrip()):
            current = []  # a new block opened before the last one closed: that one never ended
        elif stripped.lstrip() == "```":
            blocks.append("\n".join(current))
            current = None
        elif stripped.endswith("```") and not (comments and _comment_depth_after(stripped[:-3], 0)):
            current.append(stripped[:-3])  # closing fence glued to the last code line
            blocks.append("\n".join(current))
            current = None
        else:
            current.append(line.rstrip("\r"))
            depth = _comment_depth_after(line, 0) if comments else 0
    return (blocks[-1] if blocks else None), current is not None and depth > 0


def _comment_depth_after(line: str, depth: int) -> int:
    """Block-comment nesting after `line`, starting at `depth` (`/-` opens, `-/` closes, `--` and
    strings outside comments hide both). Only decides where a block's closing fence may be: the
    block's text then goes through verify's own lexer, which is the authority on comments."""
    i, n = 0, len(line)
    while i < n:
        pair = line[i:i + 2]
        if depth == 0 and pair == "--":
            return 0
        if depth == 0 and line[i] == '"':
            i += 1
            while i < n and line[i] != '"':
                i += 2 if line[i] == "\\" else 1
            i += 1
            continue
        if pair == "/-":
            depth, i = depth + 1, i + 2
            continue
        if depth > 0 and pair == "-/":
            depth, i = depth - 1, i + 2
            continue
        i += 1
    return depth


def _strip_thinking(completion: str) -> str | None:
    """The part of a completion that may hold the answer; None when the model never stopped thinking."""
    close = completion.rfind("</think>")
    if close >= 0:
        return completion[close + len("</think>"):]
    opened = completion.find("<think>")
    if opened >= 0:
        return None
    return completion
