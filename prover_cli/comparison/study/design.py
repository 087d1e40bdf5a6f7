"""A study's design as data: its arms, comparisons and tuning phase (`Study`, `Arm`, `Comparison`, `Tune`),
the names and limits every part of the study shares, and which study file a name means (`resolve_study`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prover_cli.errors import ConfigError

STUDIES_DIR = Path(__file__).resolve().parents[2] / "studies"
METHODS = ("es", "grpo")
METRICS = {"sampled": "eval/verified_rate", "greedy": "eval/greedy_verified_rate"}
TESTS = ("difference", "non-inferiority")
DONE_FILE = "study-run.json"   # written after a run's last iteration: what made it, and that it finished
STUDY_JSON = "study.json"      # the study directory's record: the locked registration, the test set's fingerprint
CHOSEN_JSON = "chosen.json"    # <dir>/tune/chosen.json: every tuned setting's dev result and the frozen choice
# Keys the study sets for every run; an arm or study override of one would break the design.
STUDY_KEYS = ("run.seed", "run.dir", "data.train_size", "data.problems")
MAX_SEEDS = 1000               # seeds per study (and per tuning phase): a design, not a sweep
MAX_RUNS = 20_000              # runs a plan lists at most
MAX_FILE_BYTES = 1 << 20       # a study file or study.json larger than this is refused unread
BASE = "base"                  # the b side of an anchor against the run's own iteration-0 evaluation
AXES = {"samples": ("samples/total", "training samples"),
        "tokens": ("tokens/total", "training completion tokens"),
        "seconds": ("time/elapsed_s", "accelerator-seconds (training wall seconds on the run's device)")}
MIN_CURVE_POINTS = 5           # evaluations per curve after the base, on the samples axis
MIN_PILOT_SEEDS = 5            # fewer, and the power table asks for more


@dataclass
class Arm:
    name: str
    method: str
    config: Path
    overrides: list[str]
    null: bool = False


@dataclass
class Comparison:
    """a - b of one held-out metric, paired by seed; `role` primary, secondary or exploratory.
    b = "base": the a run's own iteration-0 evaluation (an anchor)."""

    a: str
    a_size: int
    b: str
    b_size: int
    metric: str
    test: str = "difference"
    margin: float = 0.0
    alpha: float = 0.05
    power: float = 0.8
    role: str = "primary"
    anchor: str = ""              # "base" or "null" for the registered anchors

    @property
    def name(self) -> str:
        b = f"{self.b}@n{self.b_size}" if self.b != BASE else BASE
        return f"{self.a}@n{self.a_size} - {b} ({self.metric})"

    @property
    def sided(self) -> int:
        return 1 if self.test == "non-inferiority" else 2

    def registered(self) -> dict[str, Any]:
        return {"a": self.a, "a_size": self.a_size, "b": self.b, "b_size": self.b_size, "metric": self.metric,
                "test": self.test, "margin": self.margin, "alpha": self.alpha, "power": self.power, "role": self.role}


@dataclass
class Tune:
    """The tuning phase: per method k settings (lists of overrides), each trained on m seeds."""

    seeds: list[int]
    dev_problems: int
    train_size: int
    metric: str
    overrides: list[str]
    settings: dict[str, list[list[str]]]

    def registered(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "dev_problems": self.dev_problems, "train_size": self.train_size,
                "metric": self.metric, "set": self.overrides, "settings": self.settings}


@dataclass
class Study:
    path: Path
    name: str
    dir: Path
    seeds: list[int]
    train_sizes: list[int]
    test_seed: int
    overrides: list[str]
    arms: dict[str, Arm]
    primary: list[Comparison]
    secondary: list[Comparison] = field(default_factory=list)
    allow_unequal_budgets: bool = False
    tune: Tune | None = None
    anchors: bool = True
    min_test_problems: int = 0
    chosen: dict[str, int] | None = None   # the tuned setting per method, once frozen (tune/chosen.json)


def resolve_study(path: str | Path) -> Path:
    """The study file: `path` when it exists, else the shipped `studies/NAME.toml` it names."""
    given = Path(path)
    if given.exists():
        if not given.is_file():
            raise ConfigError(f"{given}: not a regular file, expected a study TOML",
                              hint="pass a study TOML, or a shipped study by name")
        if given.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{given}: {given.stat().st_size:,} bytes, more than a study file's {MAX_FILE_BYTES:,}",
                              hint="a study file is a few dozen lines of TOML")
        return given
    name = given.name[:-len(".toml")] if given.name.endswith(".toml") else given.name
    shipped = {p.stem: p for p in sorted(STUDIES_DIR.glob("*.toml"))}
    if len(given.parts) <= 2 and (len(given.parts) == 1 or given.parts[0] == "studies") and name in shipped:
        return shipped[name]
    raise ConfigError(f"{given}: study file not found",
                      hint=f"pass a study TOML, or a shipped study by name ({', '.join(shipped) or 'none'})")
