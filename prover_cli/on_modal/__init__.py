"""`--backend modal`: the same library functions, run on Modal. Read it top to bottom:

- plan.py       the plan: pins of every image, resources of every function, the cost (no `modal` import)
- images.py     the app, its Volumes and one image per job, as declarations
- functions.py  the function bodies: the library's own functions in containers sized for them
- sandbox.py    verification: one Lean Sandbox per batch, the REPL over its stdin/stdout
- remote.py     calling from your machine: uploads, the remote call, downloads, `modal run`
- doctor.py     `prover doctor --backend modal`: every image, a Lean Sandbox, a GPU, the Volumes, once

Only `backends.py` and `doctor.py` import this package, lazily, and only for `--backend modal`; this file
imports nothing, so `prover --help` and `--dry-run` never load the `modal` SDK.
"""
