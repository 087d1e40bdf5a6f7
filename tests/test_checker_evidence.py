"""The kernel checker's compile check until a Lean machine runs it (issue #39): every identifier and
syntax form of prover_cli/verify/kernel/checker/Main.lean and of the tag's replay file appears, used the
same way, in a source file known to build at each supported tag, with repository, path, commit and
line recorded in tests/fixtures/checker_evidence.json.

The sources per tag (the fixture's `sources`): lean4checker at the tag's release commit (the
checker's own `require`), SafeVerify at the 2024 commit of that toolchain (kernel/pins.py
SAFEVERIFY_PINS), and Batteries at the revision that SafeVerify commit's lake-manifest.json pins
(built with it; its scripts/check_imports.lean is run by Batteries' CI at that revision). The
lines were read from those commits (`git show COMMIT:PATH`, repositories fetched 2026-12-07); this
test cannot reach them, so it checks what can be checked here: that each recorded line holds the
token, at a commit of that tag, and that no token of the files lacks a line at any tag.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from checker_tokens import CHECKER_DIR, REPLAY_FILE, TAGS, lean_files, occurs, toml_tokens, tokens
from prover_cli.verify.kernel import pins

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "checker_evidence.json"
EVIDENCE = json.loads(FIXTURE.read_text(encoding="utf-8"))
# Built files of a source outside its libraries that still build at the tag (see the docstring).
SCRIPTS_BUILT = {"scripts/check_imports.lean", "scripts/runLinter.lean"}
# lakefile.toml keys with no line at a tag: the `git` key of a `[[require]]` (SafeVerify's 2024
# lakefiles at 4.14 and 4.20 require Mathlib by `scope`, and 4.21's is a lakefile.lean). A build
# that does not read it fails, and the kernel image then installs the always-failing checker (every
# proof an `error`): fail closed, and docs/verify.md says so.
TOML_GAPS = {("git =", "v4.14.0"), ("git =", "v4.20.0"), ("git =", "v4.21.0")}


def _own(name: str) -> set[str]:
    return set(EVIDENCE["own"].get(name, "").split())


def _check(record: dict, token: str, tag: str) -> None:
    commits = {(s["repo"], s["commit"]) for s in EVIDENCE["sources"][tag]}
    assert (record["repo"], record["commit"]) in commits, (token, tag, record)
    assert not record["path"].startswith("scripts/") or record["path"] in SCRIPTS_BUILT, (token, tag, record)
    assert isinstance(record["line"], int) and record["line"] > 0


@pytest.mark.parametrize("tag", TAGS)
def test_every_token_of_the_checker_has_evidence_at_the_tag(tag):
    missing = []
    for name in lean_files(tag):
        for token in sorted(tokens((CHECKER_DIR / name).read_text(encoding="utf-8"), _own(name)) - _own(name)):
            record = EVIDENCE["evidence"].get(token, {}).get(tag)
            if record is None:
                missing.append(f"{name}: {token!r}")
                continue
            _check(record, token, tag)
            assert occurs(token, record["text"].split("--")[0]), (token, tag, record["text"])
    assert not missing, f"no evidence at {tag} for: {', '.join(missing)}"


@pytest.mark.parametrize("tag", TAGS)
def test_every_lakefile_key_has_evidence_or_is_a_named_gap(tag):
    for token in sorted(toml_tokens((CHECKER_DIR / "lakefile.toml").read_text(encoding="utf-8"))):
        record = EVIDENCE["toml"].get(token, {}).get(tag)
        if (token, tag) in TOML_GAPS:
            assert record is None   # a gap that closes is taken off the list
            continue
        assert record is not None, (token, tag)
        _check(record, token, tag)
        assert record["path"].endswith("lakefile.toml") and record["text"].startswith(token.rstrip(" =")), record


def test_the_own_names_are_the_files_own():
    """Every name the fixture calls the file's own occurs in it bound there (a `def`, a binder, a
    pattern variable): a stale or invented entry would hide a token from the check above."""
    for name, names in EVIDENCE["own"].items():
        text = (CHECKER_DIR / name).read_text(encoding="utf-8")
        for own in names.split():
            assert re.search(rf"(?<![\w.]){re.escape(own)}(?![\w'?!])", text), (name, own)
            bound = re.search(rf"(def|let|let mut|fun|for|import|\||,|\(|\.\w+|some|=>|::)\s*\(?[\w\s,σ]*(?<![\w.]){re.escape(own)}\b",
                              text)
            assert bound, (name, own)


def test_the_sources_are_the_tags_commits():
    assert set(EVIDENCE["sources"]) == set(TAGS) == set(pins.LEAN4CHECKER_COMMITS)
    for tag, sources in EVIDENCE["sources"].items():
        repos = {s["repo"]: s["commit"] for s in sources}
        assert repos["leanprover/lean4checker"] == pins.LEAN4CHECKER_COMMITS[tag]
        assert repos["GasStationManager/SafeVerify"] == pins.SAFEVERIFY_PINS[tag].commit
        assert set(repos) == {"leanprover/lean4checker", "GasStationManager/SafeVerify", "leanprover-community/batteries"}


def test_the_replay_is_lean4checkers_at_the_tag():
    """`replay'` (lean4checker's own) where lean4checker's Main.lean calls it (v4.20.0, v4.21.0), the
    core `Environment.replay` where it calls that (v4.9.0 - v4.15.0)."""
    core = (CHECKER_DIR / "replay" / "core.lean").read_text(encoding="utf-8")
    prime = (CHECKER_DIR / "replay" / "prime.lean").read_text(encoding="utf-8")
    assert "env.replay newConstants" in core and "import Lean.Replay" in core and "replay'" not in core.split("-/")[-1]
    assert "env.replay' newConstants" in prime and "import Lean4Checker.Replay" in prime
    for tag, name in REPLAY_FILE.items():
        call = "env.replay' newConstants" if name.endswith("prime.lean") else "env.replay newConstants"
        assert EVIDENCE["evidence"][".replay'" if "prime" in name else ".replay"][tag]["text"].endswith(call)
        assert EVIDENCE["evidence"][".replay'" if "prime" in name else ".replay"][tag]["path"] == "Main.lean"


def test_the_checks_the_issue_names_are_in_main():
    """The defences of #39, as text of Main.lean (the stand-ins model each; the canaries test each)."""
    main = (CHECKER_DIR / "Main.lean").read_text(encoding="utf-8")
    code = re.sub(r"/-.*?-/|--[^\n]*", "", main, flags=re.S)
    assert "runtimeOnly" not in code and "(·.module)" in code                       # imports by module name only
    assert "ConstantInfo.opaqueInfo v => #[v.type, v.value]" in code                # opaque values walked
    assert "e.getUsedConstants" in code and "axiomsOf replayed [name]" in code
    assert "(toString n).toNat? == some n" in code                                  # literal canonicity
    assert "if ci.isUnsafe then" in code                                            # every unsafe constant
    # `_unsafe_rec`: exempt from the partial check, skipped as a target constant (never replayed), and
    # nowhere near the unsafe check
    assert code.count('"_unsafe_rec"') == 2 and 'dv.safety != .safe && !lastIs name "_unsafe_rec"' in code
    assert 'if lastIs name "_unsafe_rec" then\n          continue' in code
    unsafe_check = code[code.index("if ci.isUnsafe then"):code.index("else if (exprsOf ci)")]
    assert "_unsafe_rec" not in unsafe_check
    assert "rebuild" not in code                                                    # no Expr rebuild: docs/verify.md
