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

Who imports this package (checked with grep), always lazily, inside a function, and only for
`--backend modal` or a Modal price, so `prover --help` never loads it; plan/ does not import the
`modal` SDK, so no `--dry-run` loads it either:
- prover_cli/backends.py: `modal_module()` loads remote.py, doctor.py or functions.py once credentials
  are found; its function table names `plan.plan` for the `--dry-run` of `train es` / `train grpo`;
- prover_cli/doctor.py: `plan.doctor_plan` for `prover doctor --backend modal --dry-run`, and
  doctor.py's `run_doctor` through `backends.modal_module`;
- prover_cli/evaluate.py: `plan.decode_tokens_per_s` and `plan.gpu_price_per_hour`, to price an
  eval on Modal;
- prover_cli/comparison/study/plan.py: `plan.plan`, to price a study's runs; and
  prover_cli/comparison/study/runs.py: remote.py and functions.py through `backends.modal_module`
  (it also imports the `modal` SDK itself there, for its runs on Modal).
This file imports nothing. tests/test_package_indexes.py keeps the file list above complete.
"""
