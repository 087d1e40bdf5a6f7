"""Reading untrusted text, before anything runs: no Lean, no process (the first layer of `prover_cli.verify`).

    lexer.py      Lean-faithful tokens; comments blanked, strings kept, what we cannot lex refused
                  (its token tables are data in tokens/, one JSON per Lean core and Mathlib commit)
    denylist.py   cheats found in the text before anything runs (sorry, axiom, #exit, debug.*, …)
    allowlist.py  the commands and characters untrusted text may contain (theorem, lemma,
                  set_option <resource limit> … in); everything else is rejected
    statement.py  record -> code: `proof` appended to the trusted statement, or a `completion`'s
                  last ```lean4 block checked against it and rebuilt around it
    rules.py      the verdict rules (`Verdict`), and what they do not protect against
"""
