"""The checker pinned for each Lean toolchain: our own `prover_check` (checker/) for Lean 4.9 - 4.21,
SafeVerify's commits read for the record (the 2026 ones refused, #39), and the verify settings
that choose and run it (`require_pin`, `checker_command`, `policy_problem`, `pin_warning`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from prover_cli.errors import BackendError


class KernelSettings(Protocol):
    """The verify settings the pins read: a config.VerifyConfig. Named here, not imported, because
    config.py imports this module (a type-only import back would be an import circle)."""

    lean_toolchain: str
    kernel_check: bool
    allow_native_decide: bool
    allowed_axioms: list[str]
    kernel_check_workers: int
    workers: int
    kernel_checker_command: list[str]


CHECKER = "SafeVerify"
CHECKER_REPO = "GasStationManager/SafeVerify"
SAFEVERIFY_URL = f"https://github.com/{CHECKER_REPO}"
OWN_CHECKER = "prover_check"
OWN_CHECKER_DIR = Path(__file__).resolve().parent / "checker"
# What the build directory holds, and the checker's identity: own_checker_sources(toolchain).
OWN_CHECKER_FILES = ("Main.lean", "ProverReplay.lean", "lakefile.toml")
# lean4checker at the release commit of each supported tag: the checker's `require` (lakefile.toml,
# written by the kernel image's build) and its replay. `replay'` (lean4checker's own,
# Lean4Checker/Replay.lean) where lean4checker's Main.lean calls it at that tag; the core
# `Environment.replay` where it calls that (read with `git show COMMIT:Main.lean`).
LEAN4CHECKER_REPO = "https://github.com/leanprover/lean4checker"
LEAN4CHECKER_COMMITS = {
    "v4.9.0": "b3178065f785a6637f112d7857c4b64b1de83cc7",
    "v4.14.0": "bee437b6b8584f779bc20ab8b7e27934d4f711ac",
    "v4.15.0": "be02a4748128f9bf6a192f4c3b000464f99b062f",
    "v4.20.0": "aeaca0f19e8ff3ab8e0c98a52985cba7dcfb2234",
    "v4.21.0": "ad292fe49208e0cbacf3c75533fdf81f42754f3f",
}
OWN_CHECKER_REPLAY = {"v4.9.0": "replay/core.lean", "v4.14.0": "replay/core.lean", "v4.15.0": "replay/core.lean",
                      "v4.20.0": "replay/prime.lean", "v4.21.0": "replay/prime.lean"}
# The Lean runtime prints a panic and goes on with a default value unless this is set
# (src/runtime/object.cpp `lean_panic_fn`: `if (g_exit_on_panic) std::exit(1)`, set from
# LEAN_ABORT_ON_PANIC): a checker that panics must stop, never answer.
CHECKER_ENV = ("LEAN_ABORT_ON_PANIC=1",)
# What both checkers allow (SafeVerify's `AllowedAxioms` / `Settings.allowedAxioms` at every pinned
# commit, `allowedAxioms` in checker/Main.lean): verify.allowed_axioms may be narrower (we hold the
# checker's axiom list to it), never wider.
CHECKER_AXIOMS = frozenset({"propext", "Quot.sound", "Classical.choice"})


def own_checker_sources(toolchain: str) -> dict[str, str]:
    """Our checker's files as built for `toolchain` (the kernel image writes exactly these):
    Main.lean, the tag's replay file as ProverReplay.lean, lakefile.toml with lean4checker's commit."""
    return {"Main.lean": (OWN_CHECKER_DIR / "Main.lean").read_text(encoding="utf-8"),
            "ProverReplay.lean": (OWN_CHECKER_DIR / OWN_CHECKER_REPLAY[toolchain]).read_text(encoding="utf-8"),
            "lakefile.toml": (OWN_CHECKER_DIR / "lakefile.toml").read_text(encoding="utf-8")
            .replace("@LEAN4CHECKER_REV@", LEAN4CHECKER_COMMITS[toolchain])}


def own_checker_digest(toolchain: str) -> str:
    """The identity of our checker for `toolchain`: sha256 of the files it is built from."""
    import hashlib

    digest = hashlib.sha256()
    for name, text in own_checker_sources(toolchain).items():
        digest.update(name.encode() + b"\0" + text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:40]


@dataclass(frozen=True)
class CheckerPin:
    """The checker built for one Lean toolchain: a SafeVerify commit (its `lean-toolchain` file
    says so), or our own checker's source digest."""

    toolchain: str        # "v4.15.0"
    commit: str
    branch: str
    dialect: str          # "2024"/"2026": SafeVerify's; "batch": prover_check's JSON lines
    imports: str          # "none": no import check; "superset": at least the target's; "exact": equal

    @property
    def checker(self) -> str:
        return OWN_CHECKER if self.dialect == "batch" else CHECKER

    @property
    def program(self) -> str:
        """The executable's name (what `{checker}` in verify.kernel_checker_command becomes)."""
        return OWN_CHECKER if self.dialect == "batch" else "safe_verify"

    @property
    def describe(self) -> str:
        if self.dialect == "batch":
            return f"{OWN_CHECKER} {self.commit[:12]} (prover_cli/verify/kernel/checker, Lean {self.toolchain}; not compiled here)"
        return f"{CHECKER_REPO}@{self.commit[:12]} ({self.branch}, Lean {self.toolchain})"


# Read from the repository's branches (GasStationManager/SafeVerify, fetched 2026): each commit's
# `lean-toolchain` is the toolchain it is keyed by. The 2024 dialect (`Main.lean`, 146 lines) is
# the same program on every branch listed (v4.9.0 differs only in where CollectAxioms lives): no
# import check, no rebuild, no Nat-literal check, theorems and defs of the target compared only,
# unsafe constants dropped by `Environment.replay` without a word. The 2026 one (PRs #18 - #20 and
# later) added the import superset check, Init checks, Nat-literal and rebuilt-Expr/Level
# defences, the second kernel check of theorems, and inductives/constructors compared.
SAFEVERIFY_PINS: dict[str, CheckerPin] = {pin.toolchain: pin for pin in (
    CheckerPin("v4.9.0", "0c0f7dcf6cb66333a944d062ec4c431986da1ca6", "minif2f-deepseek-check", "2024", "none"),
    CheckerPin("v4.14.0", "bc5d45c35c286a8125f2e435353ec69e0ddf6b6f", "seed-prover-check", "2024", "none"),
    CheckerPin("v4.15.0", "577e95319a2bb1bb8df541f0c645811f6577a0ae", "minif2f-kimina-check", "2024", "none"),
    CheckerPin("v4.20.0", "59f3d1fd208d6149657fdc0777a6209cb3ed2820", "abc-trinity-check", "2024", "none"),
    CheckerPin("v4.21.0", "e072239e31072e71ae894ffb4d4bed9978465bbc", "v4.21", "2024", "none"),
    CheckerPin("v4.27.0", "b291b588a53999a7e837dda61c7dbfe8c550c814", "main", "2026", "superset"),
    CheckerPin("v4.29.0", "241dfb0d986baf8a3ba76cba14f10c16e8793e84", "v4.29.0", "2026", "superset"),
)}
# The checker the stage uses per toolchain: ours where the SafeVerify pin is of the 2024 dialect
# (it accepts the public attacks in KERNEL_ATTACKS). SafeVerify's 2026 commits are REFUSED (#39):
# read at b291b588 and 241dfb0d (`SafeVerify/Util.lean` `validateNewDefinitionNatLiterals`,
# `Main.lean` `replayFile`), their Nat-literal check refuses only a literal that prints with `-`
# (a non-canonical positive one, `unsafeCast (2^40 : Int) : Nat`, passes), runs only on the
# submission's constants whose names the target lacks (the target theorem's own proof is never
# looked at), and their rebuild covers def/thm/opaque only; our own literal check cannot run beside
# them (prover_check has no evidence at Lean 4.27/4.29: tests/test_checker_evidence.py). So a
# kernel stage on those toolchains refuses to start rather than pass what it does not check.
OWN_CHECKER_TOOLCHAINS = tuple(LEAN4CHECKER_COMMITS)
PINS: dict[str, CheckerPin] = {t: CheckerPin(t, own_checker_digest(t), "in-tree", "batch", "exact")
                               for t in OWN_CHECKER_TOOLCHAINS}
REFUSED_PINS: dict[str, str] = {
    t: (f"SafeVerify at {pin.commit[:8]} ({pin.branch}), the only checker built for Lean {t}, refuses a Nat literal "
        "only when it prints with `-` (a non-canonical positive literal, enough for `False`, passes), checks literals "
        "only on declarations the target does not name (never the target theorem's proof), and skips partial "
        "constants unless given --disallow-partial; this project's checker has no evidence for Lean "
        f"{t} (docs/verify.md, *The kernel stage*)")
    for t, pin in SAFEVERIFY_PINS.items() if pin.dialect == "2026"}


def toolchain_version(lean_toolchain: str) -> str:
    """`leanprover/lean4:v4.15.0` -> `v4.15.0`."""
    return lean_toolchain.rpartition(":")[2].strip()


def pin_for(lean_toolchain: str) -> CheckerPin | None:
    return PINS.get(toolchain_version(lean_toolchain))


def pin_warning(verify_config: KernelSettings) -> str | None:
    """What the configured checker does not guarantee, as a warning for doctor and the verify
    summary (None when the kernel stage is off or unpinned)."""
    pin = pin_for(verify_config.lean_toolchain) if verify_config.kernel_check else None
    if pin is None:
        return None
    if pin.dialect == "batch":
        return (f"the kernel stage's checker for Lean {pin.toolchain} is {OWN_CHECKER}, Lean code of this project "
                "that has not been compiled or run where it was written: its guarantees hold once `prover doctor "
                "--backend modal` has built it and it refused every kernel canary, and it rebuilds no Level "
                "(a forged one in a hand-written .olean is not defended); see docs/verify.md, *The kernel stage*")
    if pin.imports == "superset":
        return (f"the kernel stage's {CHECKER} pin for Lean {pin.toolchain} ({pin.branch}) accepts a proof module "
                "that imports more than the header (a superset): extra imports are kept out by the no-`import` "
                "rule on the body and by a library the elaboration cannot write; see docs/verify.md")
    return None


def policy_problem(verify_config: KernelSettings) -> tuple[str, str] | None:
    """(key, why) when the verify policy accepts proofs the kernel stage always rejects, else None."""
    if verify_config.allow_native_decide:
        return ("allow_native_decide", "the kernel checker replays native evaluation through the kernel, which cannot "
                "run compiled code (`(kernel) (interpreter) unknown declaration`), and allows only propext, "
                "Quot.sound and Classical.choice: a native_decide proof never passes")
    extra = sorted(set(verify_config.allowed_axioms) - CHECKER_AXIOMS)
    if extra:
        return ("allowed_axioms", f"the kernel checker allows only propext, Quot.sound and Classical.choice, so a proof "
                f"using {', '.join(extra)} never passes")
    return None


def effective_kernel_workers(verify_config: KernelSettings) -> int:
    """How many proofs go through the stage at a time: verify.kernel_check_workers, else verify.workers."""
    return max(1, int(verify_config.kernel_check_workers or verify_config.workers))


def checker_command(verify_config: KernelSettings, pin: CheckerPin) -> list[str]:
    """verify.kernel_checker_command with `{checker}` replaced by the pinned checker's program."""
    return [arg.replace("{checker}", pin.program) for arg in verify_config.kernel_checker_command]


def require_pin(verify_config: KernelSettings) -> CheckerPin:
    pin = pin_for(verify_config.lean_toolchain)
    refused = REFUSED_PINS.get(toolchain_version(verify_config.lean_toolchain))
    if pin is None and refused is not None:
        raise BackendError(f"verify.kernel_check = true, but the kernel stage refuses verify.lean_toolchain = "
                           f"{verify_config.lean_toolchain!r}: {refused}",
                           hint="use a toolchain prover_check covers (" + ", ".join(OWN_CHECKER_TOOLCHAINS)
                                + "), or set verify.kernel_check = false (recorded in every verdict and in the summary)")
    if pin is None:
        known = ", ".join(sorted(PINS, key=_version_key))
        raise BackendError(
            f"verify.kernel_check = true, but no kernel checker is pinned for verify.lean_toolchain = "
            f"{verify_config.lean_toolchain!r} (pinned: {known})",
            hint="use one of the pinned toolchains, or set verify.kernel_check = false (recorded in every "
                 "verdict and in the summary)")
    return pin


def _version_key(version: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.\-v]+", version) if x)
