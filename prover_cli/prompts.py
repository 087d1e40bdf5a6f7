"""Prompt templates by model family, and getting the Lean answer back out of a completion.

One place for every family, so `generate`, `eval`, ES and GRPO prompt a model the same way:

- `kimina` (Kimina-Prover Preview and its distills): chat template, the model card's system
  message, and a user turn with `# Problem:` and `# Formal statement:` sections. The model
  thinks inside `<think>...</think>` and then answers with a ```lean4 block holding the whole
  file. The completion is stored as it is; `extract_lean_block` finds the answer.
- `deepseek` (DeepSeek-Prover-V1.5 style): no chat template. The prompt is an instruction and an
  *open* ```lean4 fence followed by header + informal prefix + statement; the model continues
  with the proof. The candidate proof is the prompt's code + the completion cut at the first
  closing fence; `answer_completion` stores it wrapped in a complete ```lean4 block, so every
  samples.jsonl line reads the same way to `prover verify`.
- `plain`: the statement alone, continued like `deepseek` (for base models and the tiny test model).

Decisions about extraction, since a proof checker trusts what this returns:
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

FAMILIES = ("kimina", "deepseek", "plain")

# Kimina-Prover Preview model card (AI-MO/Kimina-Prover-Preview-Distill-*), quick start.
KIMINA_SYSTEM = "You are an expert in mathematics and Lean 4."
KIMINA_INSTRUCTION = "Think about and solve the following problem step by step in Lean 4."

# DeepSeek-Prover-V1.5 completion prompt (its repository's `prover/utils.py` style).
DEEPSEEK_INSTRUCTION = "Complete the following Lean 4 code:\n\n```lean4\n"

# Families whose prompt ends inside an open ```lean4 fence: the model continues the code.
CONTINUATION_FAMILIES = ("deepseek", "plain")


def resolve_family(model_name: str, family: str) -> str:
    """`auto` -> `kimina` if "kimina" is in the model name, `deepseek` if "deepseek" is, else `plain`."""
    if family != "auto":
        if family not in FAMILIES:
            from prover_cli.errors import ConfigError

            raise ConfigError(f"model.family = {family!r}: must be one of auto, {', '.join(FAMILIES)}")
        return family
    name = (model_name or "").lower()
    if "kimina" in name:
        return "kimina"
    if "deepseek" in name:
        return "deepseek"
    return "plain"


# --------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------

def build_prompt(problem: dict[str, Any], tokenizer: Any, family: str) -> str:
    """The text fed to the model for one Lean problem (`id`, `formal_statement`, `header`, ...).

    `family` may be `auto`: it is then resolved from the tokenizer's `name_or_path`.
    """
    family = resolve_family(getattr(tokenizer, "name_or_path", "") or "", family)
    if family == "kimina":
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            from prover_cli.errors import BackendError

            raise BackendError("model.family = \"kimina\" needs a tokenizer with a chat template, and this one has none",
                               hint="set model.family = \"plain\" (or \"deepseek\") for a base model")
        return tokenizer.apply_chat_template(kimina_messages(problem), tokenize=False, add_generation_prompt=True)
    text = DEEPSEEK_INSTRUCTION + prompt_code(problem, family) if family == "deepseek" else prompt_code(problem, family)
    # Completion-style prompts get no chat template, so nothing else adds the BOS token: the
    # samplers tokenize prompts with add_special_tokens=False (chat templates carry their own).
    bos = getattr(tokenizer, "bos_token", None)
    if isinstance(bos, str) and bos and not text.startswith(bos):
        text = bos + text
    return text


def kimina_messages(problem: dict[str, Any]) -> list[dict[str, str]]:
    """System + user messages of the Kimina-Prover Preview card, for one problem.

    The card writes `# Problem:{problem}` with no space after the colon, and a formal statement
    that includes the header and the doc comment; both are kept exactly.
    """
    informal = problem.get("informal_statement") or ""
    statement = _header(problem) + (problem.get("informal_prefix") or "") + problem["formal_statement"]
    user = (f"{KIMINA_INSTRUCTION}\n# Problem:{informal}"
            f"\n# Formal statement:\n```lean4\n{statement}\n```\n")
    return [{"role": "system", "content": KIMINA_SYSTEM}, {"role": "user", "content": user}]


def prompt_code(problem: dict[str, Any], family: str) -> str:
    """The Lean code a continuation prompt ends with (the model writes the proof after it)."""
    if family == "deepseek":
        return _header(problem) + (problem.get("informal_prefix") or "") + problem["formal_statement"]
    if family == "plain":
        return problem["formal_statement"]
    raise ValueError(f"family {family!r} is not a continuation family")  # a bug in the caller


def _header(problem: dict[str, Any]) -> str:
    header = problem.get("header") or ""
    return header if not header or header.endswith("\n") else header + "\n"


# --------------------------------------------------------------------------------------------
# Completions -> answers
# --------------------------------------------------------------------------------------------

def answer_completion(problem: dict[str, Any], completion: str, family: str) -> str:
    """What samples.jsonl stores as `completion`: text whose last ```lean4 block is the candidate.

    Chat families answer with a block themselves, so their text is kept unchanged. For
    continuation families the candidate is the prompt's code + the completion up to its first
    closing fence (the model closes the block it was continuing), wrapped in a complete block.
    """
    if family not in CONTINUATION_FAMILIES:
        return completion
    cut = completion.find("```")
    body = completion if cut < 0 else completion[:cut]
    code = prompt_code(problem, family) + body
    return "```lean4\n" + code.rstrip() + "\n```\n"


_OPEN_FENCE = re.compile(r"```(?:lean4|lean)[ \t]*$")


def extract_lean_block(completion: str) -> str | None:
    """The code of the last complete ```lean4 / ```lean block outside `<think>`, or None.

    See the module docstring for the rules (think sections, unterminated blocks).
    """
    text = _strip_thinking(completion)
    if text is None:
        return None
    blocks: list[str] = []
    current: list[str] | None = None
    for line in text.split("\n"):
        if current is None:
            if _OPEN_FENCE.search(line.rstrip("\r")):
                current = []
            continue
        stripped = line.rstrip("\r").rstrip()
        if _OPEN_FENCE.match(stripped.lstrip()):
            current = []  # a new block opened before the last one closed: that one never ended
        elif stripped.lstrip() == "```":
            blocks.append("\n".join(current))
            current = None
        elif stripped.endswith("```"):
            current.append(stripped[:-3])  # closing fence glued to the last code line
            blocks.append("\n".join(current))
            current = None
        else:
            current.append(line.rstrip("\r"))
    return blocks[-1] if blocks else None


def _strip_thinking(completion: str) -> str | None:
    """The part of a completion that may hold the answer; None when the model never stopped thinking."""
    close = completion.rfind("</think>")
    if close >= 0:
        return completion[close + len("</think>"):]
    opened = completion.find("<think>")
    if opened >= 0:
        return None
    return completion
