"""prover: train Lean 4 theorem provers with Evolution Strategies and GRPO."""

__version__ = "0.1.0"
