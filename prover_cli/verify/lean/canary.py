"""The canary: do our verdict rules hold on *this* Lean toolchain?

The rules read Lean's answers (message shapes, `#print axioms` lines, the axioms native code
uses, whether Lean accepts the statement check), and those change between Lean versions. So before the first proof on
a toolchain, and in `prover doctor`, a small built-in set of real Lean texts runs through the
same pool code as every proof (`ReplPool.check`), skipping only the text checks so that each
Lean-side rule is exercised: honest proofs that must come out `verified`, and one cheat per
rule that must come out `rejected`. If any comes out otherwise, verification refuses to run and
names the rule that does not hold here: on first contact with a real Lean install this tells the
user whether our rules match their Lean version.

The texts use only Lean core (no Mathlib names), so they mean the same under any header. The
honest ones cover each shape of target whose printout once misled us: no binders, an explicit,
implicit or instance binder first, and a universe-polymorphic one (with a universe-specialised
cheat). A failure names the rule and puts what we expected next to what Lean answered (the
verdict's reason quotes Lean), with the statement and text checked, for a one-paste report.
A passing result is cached on disk per toolchain (`canary_cache_key`); a failing one never is.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover_cli.errors import BackendError
from prover_cli.verify.text.rules import AllowedAxioms
from prover_cli.verify.text.statement import Candidate

if TYPE_CHECKING:
    from prover_cli.config import VerifyConfig

CANARY_VERSION = 2   # 2: Lean's statement check by restatement; five binder/universe shapes
STANDARD_AXIOMS = ("propext", "Classical.choice", "Quot.sound")


@dataclass(frozen=True)
class Canary:
    name: str
    rule: str          # what must hold; named in the refusal when it does not
    statement: str     # the trusted statement
    body: str          # what is sent (the untrusted file, already assembled)
    expect: str        # "verified" or "rejected"
    native: bool = False   # judged under the native_decide policy instead of the default one

    @property
    def target(self) -> str:
        return self.statement.split()[1].split(".{")[0]


def _s(name: str, rest: str) -> str:
    return f"theorem prover_canary_{name}{rest}"


CANARIES: tuple[Canary, ...] = (
    # honest proofs, one per binder shape of the target: Lean's statement check must accept each
    Canary("honest, no binders", "an honest proof is verified (messages, `#print axioms` and the statement "
           "check are read correctly)",
           _s("decide", " : 2 + 2 = 4 := by"), _s("decide", " : 2 + 2 = 4 := by") + "\n  decide", "verified"),
    Canary("honest, explicit binder first", "a proof of a target whose first binder is explicit, through a helper "
           "lemma and `set_option maxHeartbeats N in`, is verified",
           _s("helper_use", " (n : Nat) : n + 0 = n := by"),
           "theorem prover_canary_helper (n : Nat) : n + 0 = n := rfl\n\n"
           "set_option maxHeartbeats 400000 in\n"
           + _s("helper_use", " (n : Nat) : n + 0 = n := by") + "\n  exact prover_canary_helper n", "verified"),
    Canary("honest, implicit binder first", "a proof of a target whose first binder is implicit is verified",
           _s("implicit", " {n : Nat} (h : n = 1) : n + 0 = 1 := by"),
           _s("implicit", " {n : Nat} (h : n = 1) : n + 0 = 1 := by") + "\n  exact h", "verified"),
    Canary("honest, instance binder first", "a proof of a target whose first binder is an instance is verified",
           _s("instance_first", " [Inhabited Nat] (n : Nat) : n + 0 = n := by"),
           _s("instance_first", " [Inhabited Nat] (n : Nat) : n + 0 = n := by") + "\n  rfl", "verified"),
    Canary("honest, universe-polymorphic", "a proof of a universe-polymorphic target is verified",
           _s("universe.{u}", " {α : Sort u} (a : α) : a = a := by"),
           _s("universe.{u}", " {α : Sort u} (a : α) : a = a := by") + "\n  rfl", "verified"),
    # one cheat per rule
    Canary("sorry", "a proof with `sorry` is rejected",
           _s("sorry", " : 2 + 2 = 5 := by"), _s("sorry", " : 2 + 2 = 5 := by") + "\n  sorry", "rejected"),
    Canary("extra axiom", "a proof through a declared axiom is rejected (`#print axioms`)",
           _s("axiom", " : 2 + 2 = 5 := by"),
           "axiom prover_canary_false : 2 + 2 = 5\n\n" + _s("axiom", " : 2 + 2 = 5 := by")
           + "\n  exact prover_canary_false", "rejected"),
    Canary("native_decide", "`native_decide` is rejected under the default policy",
           _s("native", " : 2 + 2 = 4 := by"), _s("native", " : 2 + 2 = 4 := by") + "\n  native_decide",
           "rejected"),
    Canary("added hypothesis", "a hypothesis added to the target is rejected (Lean's statement check)",
           _s("hypothesis", " : 2 + 2 = 5 := by"),
           _s("hypothesis", " (h : False) : 2 + 2 = 5 := by") + "\n  exact h.elim", "rejected"),
    Canary("instance variable", "an instance hypothesis added through `variable` is rejected (statement check)",
           _s("instance", " : 2 + 2 = 5 := by"),
           "variable [prover_canary_inst : Nonempty Empty]\n\n" + _s("instance", " : 2 + 2 = 5 := by")
           + "\n  exact (Classical.choice prover_canary_inst).elim", "rejected"),
    Canary("universe specialised", "a proof of a universe-polymorphic target for one universe only is rejected "
           "(statement check)",
           _s("universe_cheat.{u}", " {α : Sort u} (a b : α) : a = b ∨ True := by"),
           _s("universe_cheat", " {α : Prop} (a b : α) : a = b ∨ True := by") + "\n  exact Or.inl rfl",
           "rejected"),
    Canary("renamed target", "a proof of a renamed target is rejected",
           _s("renamed", " : 2 + 2 = 4 := by"), _s("renamed'", " : 2 + 2 = 4 := by") + "\n  decide", "rejected"),
    Canary("namespace", "a target declared in another namespace is rejected (name resolution)",
           _s("namespace", " : 2 + 2 = 4 := by"),
           "namespace ProverCanary\n\n" + _s("namespace", " : 2 + 2 = 4 := by") + "\n  decide", "rejected"),
)

NATIVE_CANARY = Canary("native_decide allowed", "`native_decide` is verified under verify.allow_native_decide "
                       "(the axioms native evaluation uses on this Lean version are known)",
                       _s("native", " : 2 + 2 = 4 := by"), _s("native", " : 2 + 2 = 4 := by") + "\n  native_decide",
                       "verified", native=True)


def canaries_for(verify_config: VerifyConfig) -> tuple[Canary, ...]:
    extra = (NATIVE_CANARY,) if verify_config.allow_native_decide else ()
    return CANARIES + extra


def run_canary(pool: Any) -> list[dict[str, Any]]:
    """Every canary through `pool` (a ReplPool: on its first process, in this thread; a backend
    with `check_canaries`, the Kimina one: through that): one result each."""
    config = pool.config
    canaries = canaries_for(config)
    pairs = [(Candidate(id=f"canary: {canary.name}", header=config.header, body=canary.body,
                        target=canary.target, statement=canary.statement),
              AllowedAxioms(STANDARD_AXIOMS, native=canary.native)) for canary in canaries]
    check_many = getattr(pool, "check_canaries", None)
    if check_many is not None:
        verdicts = check_many(pairs)
    else:
        verdicts = [pool.check(pool.processes[0], candidate, allowed) for candidate, allowed in pairs]
    return [{"canary": canary.name, "rule": canary.rule, "expect": canary.expect, "got": verdict.status,
             "reason": verdict.reason, "statement": canary.statement, "proof": canary.body,
             "lean": [m.get("data") for m in verdict.messages if isinstance(m, dict)],
             "ok": verdict.status == canary.expect}
            for canary, verdict in zip(canaries, verdicts)]


def failures_message(results: list[dict[str, Any]]) -> str:
    """One paragraph per failed canary: the rule, what we expected next to what Lean answered (the
    verdict's reason quotes Lean), the trusted statement and the text checked, so that a user can
    report it in one paste."""
    bad = [r for r in results if not r["ok"]]
    return "; ".join(
        f"rule `{r['rule']}` does not hold on this toolchain (canary {r['canary']!r}: expected {r['expect']}, "
        f"got {r['got']}; Lean answered: {r['reason'][:600]}"
        + (f"; Lean's messages on the proof: {' | '.join(str(d)[:200] for d in r.get('lean') or [])}"
           if r.get("lean") else "")
        + f"; trusted statement: `{r.get('statement', '')}`; checked: `{str(r.get('proof', '')).replace(chr(10), ' ⏎ ')[:300]}`)"
        for r in bad)


def ensure_canary(pool: Any) -> None:
    """Run the canary once per toolchain (cached on disk); BackendError when any rule fails."""
    config = pool.config
    # e.g. a Modal image id (a transport's factory), or the Kimina server's URL (its backend)
    transport = getattr(pool, "canary_key", None) or getattr(pool.transport_factory, "canary_key", None)
    path = cache_dir() / f"{canary_cache_key(config, transport)}.json"
    if cached_pass(path):
        return
    results = run_canary(pool)
    if not all(r["ok"] for r in results):
        raise BackendError("verification refuses to run: " + failures_message(results),
                           hint="run `prover doctor`; the verdict rules do not match this Lean version "
                                "(verify.repl_command, verify.project_dir, verify.header)")
    store_pass(path, _key_fields(config, transport), results)


def cached_pass(path: Path) -> bool:
    """A pass recorded at `path` (by `store_pass`)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("ok") is True
    except (OSError, ValueError):
        return False


def store_pass(path: Path, key: dict[str, Any], results: list[dict[str, Any]]) -> None:
    """Record a pass (never a failure); without a writable cache the canary only runs again next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"ok": True, "key": key, "checked_at": time.time(), "results": results},
                                  indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def cache_dir() -> Path:
    """`$PROVER_CANARY_CACHE`, else `$XDG_CACHE_HOME/prover/canary`, else `~/.cache/prover/canary`."""
    explicit = os.environ.get("PROVER_CANARY_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "prover" / "canary"


def _key_fields(config: VerifyConfig, transport: Any = None) -> dict[str, Any]:
    """What identifies a toolchain here: the REPL command and project, the `lean-toolchain` and
    `lake-manifest.json` it runs with, the header, the configured versions and the policy, and
    for a non-local transport its `canary_key` (an attribute of its factory, e.g. an image id)."""
    project, files = project_files(config)
    return {"canary": CANARY_VERSION, "repl_command": list(config.repl_command), "project_dir": str(project),
            "files": files, "header": config.header, "lean_toolchain": config.lean_toolchain,
            "mathlib_rev": config.mathlib_rev, "allow_native_decide": bool(config.allow_native_decide),
            "transport": None if transport is None else str(transport)}


def project_files(config: VerifyConfig) -> tuple[Path, dict[str, str | None]]:
    """The Lean project and the hashes of its `lean-toolchain` and `lake-manifest.json`."""
    project = Path(config.project_dir or os.getcwd()).resolve()
    files: dict[str, str | None] = {}
    for name in ("lean-toolchain", "lake-manifest.json"):
        try:
            files[name] = hashlib.sha256((project / name).read_bytes()).hexdigest()
        except OSError:
            files[name] = None
    return project, files


def canary_cache_key(config: VerifyConfig, transport: Any = None) -> str:
    text = json.dumps(_key_fields(config, transport), sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:24]
