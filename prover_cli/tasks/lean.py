"""The main task: prove a Lean 4 theorem. Reward 1.0 only for a `verified` verdict.

The prompt comes from `prover_cli.policy.prompts` (one place for every model family) and the reward from
the `verify` engine, in one batch per call, so ES, GRPO and `prover verify` share one reward path.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Sequence

from prover_cli.policy.prompts import answer_completion, build_prompt, resolve_family
from prover_cli.progress import Reporter
from prover_cli.tasks import register_task

if TYPE_CHECKING:
    from prover_cli.config import Config

DECL_NAME = re.compile(r"\b(theorem|lemma)\s+([^\s(:{\[]+)")  # a Lean declaration's keyword and name


@register_task("lean")
class LeanTask:
    name = "lean"
    problem_fields = {"formal_statement": (str, True), "header": (str, False), "informal_statement": (str, False),
                      "informal_prefix": (str, False)}
    reward_range = (0.0, 1.0)  # problems come from a file (`prepare-data`): no problems_from_seed

    def content_key(self, problem: dict[str, Any]) -> str | None:
        """The statement, with its header (which may hold an answer), up to whitespace and the
        theorem's name; None for a row without a statement."""
        if not isinstance(problem.get("formal_statement"), str):
            return None
        statement = DECL_NAME.sub(r"\1 _", problem["formal_statement"], count=1)
        return "lean|" + " ".join((str(problem.get("header") or "") + "\n" + statement).split())

    def build_prompt(self, problem: dict[str, Any], tokenizer: Any, family: str) -> str:
        return build_prompt(problem, tokenizer, family)

    def rewards(self, problems: Sequence[dict[str, Any]], completions: Sequence[str], config: Config,
                reporter: Reporter | None = None) -> list[float]:
        from prover_cli.verify import verify_records  # lazy: the verify engine and its REPL pools, for a reward only

        # Continuation-style families (DeepSeek, plain) complete the prompt's code: the candidate
        # is prompt code + completion, exactly what `prover generate` stores.
        family = resolve_family(config.model.name, config.model.family)
        records = [
            {
                "id": f"{p['id']}#{i}",
                "formal_statement": p["formal_statement"],
                "header": p.get("header") or config.verify.header,
                "completion": answer_completion(p, c, family),
            }
            for i, (p, c) in enumerate(zip(problems, completions, strict=True))
        ]
        # keep_warm: the REPL pool (and its `import Mathlib`) outlives this batch.
        verdicts = verify_records(records, config.verify, reporter=reporter, keep_warm=True)
        # Fail closed: anything but `verified` (rejected, timeout, error) is worth nothing.
        return [1.0 if v["verdict"] == "verified" else 0.0 for v in verdicts]
