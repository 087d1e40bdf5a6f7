"""Which Lean the REPL runs, and whether it has everything the verifier sends.

The version is detected once per REPL start (pool.py), from the file that decides it: the
`lean-toolchain` of `verify.project_dir` (elan and `lake env repl` run the toolchain it names),
else `verify.lean_toolchain` (the pin the Modal image is built from). Reading the file, not asking
Lean (`#eval Lean.versionString`), keeps every command we send among the forms whose real output
is recorded (tests/lean_corpus), and costs no round trip.

`SENT` lists every option and command form the verifier sends (rules.py: `trusted_command`,
`alias_command`) with the first Lean release that has it, read in Lean's source. None needs more
than the oldest release we know of (v4.3.0, the first in ../shared/lean-repl-transcripts/by-tag),
so DeepSeek-Prover-V1.5's and Goedel-Prover-V1's v4.9.0 works; `check_capabilities` refuses to run,
naming the form and the version, on a toolchain that lacks one, instead of failing every record.
`NOT_SENT` records forms we deliberately do not send and why (`pp.maxSteps` exists only from
v4.10.0, lean4#4556: on v4.9 every command carrying it is an "unknown option" error).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from prover_cli.errors import BackendError

if TYPE_CHECKING:
    from prover_cli.config import VerifyConfig

Version = tuple[int, int, int]

# form the verifier sends -> (first Lean release that has it, where that is read)
SENT: dict[str, tuple[Version, str]] = {
    "set_option pp.fullNames true in": ((4, 0, 0), "option `pp.fullNames`, src/Lean/PrettyPrinter/Delaborator/Options.lean"),
    "#print axioms NAME": ((4, 0, 0), "src/Lean/Elab/Print.lean (`elabPrintAxioms`)"),
    "type_of% TERM": ((4, 0, 0), "src/Lean/Elab/BuiltinNotation.lean (`elabTypeOf`)"),
    "theorem _root_.NAME : TYPE := TERM": ((4, 0, 0), "`_root_` in declaration names, `mkDeclName` in src/Lean/Elab/DeclModifiers.lean"),
    "axiom NAME {p : Prop} : p": ((4, 0, 0), "src/Lean/Elab/Declaration.lean (`elabAxiom`)"),
    "theorem NAME.{u} … := TERM (universe level mvars in the header become parameters)":
        ((4, 0, 0), "`levelMVarToParamHeaders`, src/Lean/Elab/MutualDef.lean"),
}

# forms we do not send, and why
NOT_SENT: dict[str, tuple[Version, str]] = {
    "set_option pp.maxSteps": ((4, 10, 0), "added by lean4#4556 (v4.10.0): an unknown option before"),
    "#check @NAME": ((4, 0, 0), "its printout depends on binder kinds (`@` only for an implicit first "
                                "binder), universes and pp options; Lean compares the types instead"),
}

_TOOLCHAIN = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def parse_toolchain(text: str) -> Version | None:
    """`leanprover/lean4:v4.9.0` (or `v4.33.0-rc2`, `4.15.0`) -> (4, 9, 0); None for a nightly or
    anything else we cannot place."""
    match = _TOOLCHAIN.search(text.strip().rpartition(":")[2])
    return (int(match.group(1)), int(match.group(2)), int(match.group(3))) if match else None


def detect_version(verify_config: VerifyConfig) -> tuple[Version | None, str]:
    """(version, where it was read), from `<verify.project_dir>/lean-toolchain`, else
    `verify.lean_toolchain`; (None, why) when neither names a release."""
    project = Path(verify_config.project_dir or ".")
    path = project / "lean-toolchain"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        text = ""
    if text:
        version = parse_toolchain(text)
        return version, f"{path} ({text})"
    configured = verify_config.lean_toolchain
    return parse_toolchain(configured), f"verify.lean_toolchain ({configured or 'empty'})"


def missing_capabilities(version: Version | None, sent: dict[str, tuple[Version, str]] = SENT) -> list[str]:
    """The forms in `sent` that `version` lacks (none when the version is unknown: the canary and
    the fail-closed rules then decide)."""
    if version is None:
        return []
    return [form for form, (since, _) in sent.items() if version < since]


def check_capabilities(verify_config: VerifyConfig, sent: dict[str, tuple[Version, str]] = SENT) -> Version | None:
    """The detected version; BackendError naming each form this toolchain lacks."""
    version, where = detect_version(verify_config)
    missing = missing_capabilities(version, sent)
    if missing and version is not None:   # missing is empty when the version is unknown
        shown = ".".join(map(str, version))
        raise BackendError(f"Lean {shown} (read from {where}) lacks what the verifier sends: "
                           + "; ".join(f"`{form}` needs Lean {'.'.join(map(str, sent[form][0]))} "
                                       f"({sent[form][1]})" for form in missing),
                           hint="use a newer toolchain (verify.project_dir, verify.lean_toolchain)")
    return version
