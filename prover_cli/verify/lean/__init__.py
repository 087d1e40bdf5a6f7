"""Talking to Lean: the fast path that elaborates untrusted text (the second layer of `prover_cli.verify`;
it imports verify/text/ and nothing above it).

    repl.py           one REPL process: framing, deadlines on every read and write
    transport.py      where it runs: LocalTransport (own process group, memory limit, dies with us
                      via repl_watchdog.py) or another Transport (Modal)
    repl_watchdog.py  the parent-death watchdog a local REPL runs under (run as a script)
    box.py            the bubblewrap box every local process that elaborates untrusted text runs in
                      (the REPLs here, and the kernel stage's steps)
    toolchain.py      the Lean version a REPL runs (its `lean-toolchain`), checked against what we send
    pool.py           `verify.workers` processes: header once per process, the trusted statement once
                      per problem, proofs in its env, Lean's statement check, restarts, one retry
                      after a REPL killed from outside, recycling after a record that could run code
    kimina.py         the same rules against a Kimina Lean Server
    canary.py         honest proofs and one cheat per rule, run once per toolchain and by `doctor`
"""
