"""`prover study`: the ES-versus-GRPO question as one pre-registered design, arms x sizes x seeds.

    prover study plan demo                       # every run, its cost, the power (prover_cli/studies/demo.toml)
    prover study tune demo                       # the tuning phase alone: settings on a dev split, then frozen
    prover study run demo                        # tunes, freezes, then runs what is missing; again: reruns nothing
    prover study report demo                     # the pre-registered comparisons first (Holm), then exploratory

A study file (TOML, docs/study.md gives every key) names the arms (a method, a base config and
`--set`-style overrides), the seeds, the training-set sizes (`data.train_size`: the limited-data
axis), an optional tuning phase (`[tune]`) and the comparisons, decided before any run: the
primary ones (Holm-corrected together) and the secondary ones. Every run of a study reads ONE
problems file, drawn once from `study.test_seed` into the study directory, so every seed, arm and
size is evaluated on the same held-out problems (the test set). A seed changes the training
subset, the noise and the sampling, never the test set.

**The registration is a lock.** At the first `run` (or `tune`) the registration, every arm (method,
base config by content, overrides), the seeds, sizes, budgets, comparisons with their margins,
the tuning table and the test set's fingerprint, is written into `study.json` with its sha256;
the settings tuning chose are frozen into it before any test-set run. `run` and `report` refuse a
study file whose registration differs (naming each changed key): a new question is a new study
directory.

**Tuning** (`[tune]`): each tuned method gets the same budget, k settings x m seeds of equal
training samples, trained on the training split less a dev split carved out of it (`<dir>/tune/
problems.jsonl`: the test set's rows are not in it at all) and scored on that dev split; the
setting with the best mean dev result is chosen per method and applied to every arm of that
method (its null arm too). Every setting's dev result is reported. A test set whose fingerprint a
tuning run recorded, or that shares a problem with the dev split, is refused.

**Anchors** (`study.anchors = true`, the default): every arm of a method is registered against its
base (the run's own iteration-0 evaluation) and against its method's null arm (shuffled rewards),
as secondary comparisons; a non-inferiority verdict is printed only when the comparator beat its
own base (its anchor's 95% interval above 0).

Runs live in `<study.dir>/runs/<arm>/n<size>/seed<seed>/` (n0 = every training problem), tuning runs
in `<study.dir>/tune/runs/<method>/k<i>/seed<seed>/`. A run is reused only when it finished
(`study-run.json`, written after its last iteration) and both its resolved config and the code that
made it (`code.json`) equal what this process would run now; any other run directory is trained
again from the start, so an interrupted study resumes run by run.

`report` pairs runs by seed at the largest common training budget of each pair, by the one rule
`prover report` uses too (prover_cli/comparison/compare.py: `final_at`), refused when more than 5 % apart for a
registered comparison; an exploratory pair that cannot be compared is listed as such. The per-seed
differences give a t interval and a paired t p-value (two-sided, or the one-sided non-inferiority
test against `margin`). The report directory is written whole or not at all (a temporary
directory renamed into place).

Modules, from the commands down (tests/test_package_indexes.py keeps this list complete):

- `plan.py`: `prover study plan`: every run, its state and cost, the comparisons, power from a pilot.
- `tuning.py`: `prover study tune`: settings x seeds on the dev split, the choice frozen.
- `run.py`: `prover study run`: tune, freeze, then train what is missing.
- `report.py`: `prover study report`: primary (Holm), secondary, power, tuning, limited data,
  exploratory; the report directory written whole or not at all.
- `figures.py`: held-out curves on the samples, tokens and accelerator-seconds axes, and each
  comparison's paired difference.
- `limited_data.py`: the held-out rate by training-set size x budget, as a table and a figure.
- `power.py`: power from this study or a pilot, and the seeds and problems needed.
- `paired.py`: one comparison over the seeds: each pair's evaluations at its largest common
  budget, the per-seed differences, the t interval and the paired t test.
- `tables.py`: numbers as printed, comparison tables, CSV and Markdown.
- `registration.py`: the locked registration (`study.json`) and the test set locked with it.
- `runs.py`: the planned runs, which are finished with this code and config, training the rest.
- `problem_sets.py`: the study's problems file, the test set and its fingerprint, the dev split.
- `study_file.py`: reading and validating a study file (`load_study`), the design checked.
- `run_configs.py`: each test and tuning run's resolved config, directory and training samples.
- `design.py`: the study as data (`Study`, `Arm`, `Comparison`, `Tune`), the shared names and
  limits, and which study file a name means (`resolve_study`).
"""
