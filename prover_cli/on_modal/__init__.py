"""`--backend modal`: the same library functions, run on Modal. Read it top to bottom:

- plan/         the plan: pins of every image, resources of every function, the cost (no `modal` import)
- images.py     the app, its Volumes and one image per job, as declarations
- functions.py  the function bodies: the library's own functions in containers sized for them
- sandbox.py    verification: where the library's verify runs on Modal, one Lean Sandbox per REPL process,
                the REPL over its stdin/stdout
- remote.py     calling from your machine: uploads, the remote call, downloads, `modal run`
- doctor.py     `prover doctor --backend modal`: every image, a Lean Sandbox, a GPU, the Volumes, once
- calibration.py  the figures the doctor measured, which the plan then uses in place of estimates
- gpu_memory.py   what one GPU holds (weights, KV budget, fp32 masters, contexts); the plan refuses what does not fit
- pipeline.py   the pipelined ES schedule: what one member GPU container does (`modal.es_member_gpus`)
- schedule.py   one ES iteration as a discrete-event schedule, barrier vs pipelined (no `modal` import)

Only `prover_cli/backends.py` and `prover_cli/doctor.py` import this package, lazily, and only for
`--backend modal`; this file imports nothing, so `prover --help` and `--dry-run` never load the
`modal` SDK. tests/test_package_indexes.py keeps this list complete.
"""
