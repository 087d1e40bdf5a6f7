"""Lean verification: the reward. Fails closed; see verify/text/rules.py for what counts as verified.

Three layers, each importing only the ones before it (tests/test_layers.py checks), then the entry
points that put them together:

    text/         reading untrusted text, no Lean: the lexer, the denylist and allowlist, a record
                  turned into the code to check, the verdict rules
    lean/         talking to Lean: one REPL, where it runs (transport, the bubblewrap box), the
                  toolchain, the REPL pool, the Kimina server, and the canary both fast paths run
    kernel/       the second stage on every pass: `lean -o` afresh and the pinned checker (Lean's
                  kernel re-check of the .olean files), in batches, each step in a fresh process
    placement.py  where verification runs (here, or Modal Sandboxes): never what it computes
    engine.py     `verify_file` (the `prover verify` command) and `verify_records` (the RL reward)

Each folder's `__init__.py` lists its modules in the order a proof meets them.
tests/test_package_indexes.py keeps these lists complete.
"""

from prover_cli.verify.engine import Verifier, verify_file, verify_records
from prover_cli.verify.text.rules import VERDICTS, Verdict

__all__ = ["VERDICTS", "Verdict", "Verifier", "verify_file", "verify_records"]
