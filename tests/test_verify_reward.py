"""The lean task's reward goes through verify_records: 1.0 only for `verified`, and a whole batch
at once (ES and GRPO call it with completions; `reporter=None` is how tasks call it)."""

from __future__ import annotations

from prover_cli.config import Config
from prover_cli.tasks import get_task
from test_verify_statement import STATEMENT


def test_lean_task_rewards_only_verified_completions(verify_config):
    config = Config()
    config.verify = verify_config()
    problems = [{"id": "amc_p1", "formal_statement": STATEMENT}] * 4
    completions = [
        f"Proof:\n```lean4\n{STATEMENT}\n  linarith\n```",                 # verified (stand-in)
        f"```lean4\n{STATEMENT}\n  sorry\n```",                              # denied
        "I cannot do it.",                                                   # no code block
        f"```lean4\n{STATEMENT.replace('x = 2', 'x = 3')}\n  linarith\n```",  # other statement
    ]
    assert get_task("lean").rewards(problems, completions, config) == [1.0, 0.0, 0.0, 0.0]
