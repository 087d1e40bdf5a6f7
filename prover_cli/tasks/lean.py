"""The main task: prove a Lean 4 theorem. Reward 1.0 only for a `verified` verdict.

The prompt comes from `prover_cli.prompts` (one place for every model family) and the reward from
the `verify` engine, in one batch per call, so ES, GRPO and `prover verify` share one reward path.
"""

from __future__ import annotations

from typing import Any, Sequence

from prover_cli.tasks import register_task


@register_task("lean")
class LeanTask:
    name = "lean"

    def build_prompt(self, problem: dict[str, Any], tokenizer: Any, family: str) -> str:
        from prover_cli.prompts import build_prompt

        return build_prompt(problem, tokenizer, family)

    def rewards(self, problems: Sequence[dict[str, Any]], completions: Sequence[str], config: Any,
                reporter: Any = None) -> list[float]:
        from prover_cli.verify import verify_records

        records = [
            {
                "id": f"{p['id']}#{i}",
                "formal_statement": p["formal_statement"],
                "header": p.get("header") or config.verify.header,
                "completion": c,
            }
            for i, (p, c) in enumerate(zip(problems, completions, strict=True))
        ]
        verdicts = verify_records(records, config.verify, reporter=reporter)
        # Fail closed: anything but `verified` (rejected, timeout, error) is worth nothing.
        return [1.0 if v["verdict"] == "verified" else 0.0 for v in verdicts]
