"""Lean verification: the reward. Fails closed; see `rules.py` for what counts as verified.

Modules, in the order a proof meets them:

    lexer.py      Lean-faithful tokens; comments blanked, strings kept, what we cannot lex refused
    denylist.py   cheats found in the text before anything runs (sorry, axiom, #exit, debug.*, …)
    allowlist.py  the commands and characters untrusted text may contain (theorem, lemma,
                  set_option <resource limit> … in); everything else is rejected
    statement.py  record -> code: `proof` appended to the trusted statement, or a `completion`'s
                  last ```lean4 block checked against it and rebuilt around it
    repl.py       one REPL process: framing, deadlines on every read and write
    transport.py  where it runs: LocalTransport (own process group, memory limit, dies with us via
                  repl_watchdog.py) or another Transport (Modal)
    toolchain.py  the Lean version a REPL runs (its `lean-toolchain`), checked against what we send
    pool.py       `verify.workers` processes: header once per process, the trusted statement once
                  per problem, proofs in its env, Lean's statement check, restarts, one retry
                  after a REPL killed from outside, recycling after a record that could run code
    canary.py     honest proofs and one cheat per rule, run once per toolchain and by `doctor`
    kimina.py     the same rules against a Kimina Lean Server
    rules.py      the verdict rules (`Verdict`), and what they do not protect against
    kernel.py     the second stage on every pass: `lean -o` afresh and the pinned checker
                  (Lean's kernel re-check of the .olean files), in batches
    checker/      prover_check, the pinned checker's Lean source for Lean 4.9-4.21
    isolated.py   one command in a fresh process with a directory of its own: data in, data out
    box.py        the bubblewrap box every local process that elaborates untrusted text runs in
    placement.py  where verification runs (here, or Modal Sandboxes): never what it computes
    engine.py     `verify_file` (the `prover verify` command) and `verify_records` (the RL reward)

The token tables lexer.py reads are data in tokens/. tests/test_package_indexes.py keeps this list
complete.
"""

from prover_cli.verify.engine import Verifier, verify_file, verify_records
from prover_cli.verify.rules import VERDICTS, Verdict

__all__ = ["VERDICTS", "Verdict", "Verifier", "verify_file", "verify_records"]
