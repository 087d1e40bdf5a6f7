"""The kernel stage: the second, trusted check of every fast-path pass (the third layer of
`prover_cli.verify`; it imports verify/text/ and verify/lean/, nothing above it). stage.py's
docstring says what it guarantees.

    isolated.py             one command in a fresh process with a directory of its own: data in, data out
    pins.py                 the checker pinned per Lean toolchain (ours, `prover_check`, in checker/;
                            SafeVerify's commits, read and refused) and the settings that pick and run it
    job.py                  what goes in (`KernelJob`, the two Lean files, each step's argv) and what
                            comes out (`KernelResult`, reading `lean -o`, what both readers share)
    safeverify_reader.py    reading SafeVerify, both dialects (2024, 2026)
    prover_check_reader.py  reading prover_check's batch answer (checker/Main.lean)
    installed_checker.py    which checker is installed, and its packages against the project's
    stage.py                `KernelStage`: elaborate afresh, batch, check, split failed batches; verdicts
    kernel_canary.py        the stage's canary and the public attacks it must reject
    batching.py             `second_stage`: the stage behind a backend, batches that grow while it is busy
    checker/                prover_check, the pinned checker's Lean source for Lean 4.9-4.21
"""
