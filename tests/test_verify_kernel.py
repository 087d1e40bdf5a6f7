"""The kernel stage (prover_cli/verify/kernel/) against its stand-ins: tests/fake_lean.py for
`lean -o`, tests/fake_checker.py for our prover_check (Lean 4.15, the default toolchain's pin)
and tests/fake_safe_verify.py for SafeVerify (the 2026 pin, Lean 4.27). These say nothing about
real proofs: they test the steps, the data passed between them, the batches, the verdict mapping
and every fail-closed path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import fake_checker
from conftest import PATIENCE_S, wait_until
from prover_cli.errors import BackendError, ConfigError
from prover_cli.verify.kernel.isolated import LocalRunner, RunResult
from prover_cli.verify.kernel.job import KernelJob, KernelResult, checker_argv, read_elaboration
from prover_cli.verify.kernel.pins import CHECKER_ENV, PINS, REFUSED_PINS, SAFEVERIFY_PINS, pin_for
from prover_cli.verify.kernel.safeverify_reader import read_checker
from prover_cli.verify.kernel.stage import KernelStage, kernel_verdict
from prover_cli.verify.text.rules import Verdict

TESTS = Path(__file__).resolve().parent
FAKE_LEAN = [sys.executable, str(TESTS / "fake_checker.py"), "--as-lean"]   # fake_lean.py + the attacks
HEADER = "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 400000\n\nopen BigOperators Real Nat Topology Rat\n"
STANDARD = {"propext", "Classical.choice", "Quot.sound"}
PIN_OWN = PINS["v4.15.0"]
PIN_2026 = SAFEVERIFY_PINS["v4.27.0"]   # refused by the stage (#39): its stand-in is read, never run by a stage
BOTH = pytest.mark.parametrize("pin", [PIN_OWN], ids=["prover-check"])
FAKE_CHECKER = [sys.executable, str(TESTS / "fake_checker.py")]


def checker_command(pin) -> list[str]:
    if pin.dialect == "batch":
        return list(FAKE_CHECKER)
    return [sys.executable, str(TESTS / "fake_safe_verify.py"), "--pin", pin.commit]


@pytest.fixture
def stage(verify_config):
    def make(pin=PIN_OWN, **overrides):
        settings = dict(lean_toolchain=f"leanprover/lean4:{pin.toolchain}", lean_command=FAKE_LEAN,
                        kernel_checker_command=checker_command(pin), kernel_check_timeout_s=PATIENCE_S)
        config = verify_config(**{**settings, **overrides})
        return KernelStage(config)
    return make


def job(body: str, statement: str = "theorem t : 2 + 2 = 4 := by", header: str = HEADER) -> KernelJob:
    return KernelJob(header=header, statement=statement, target=statement.split()[1], body=body)


HONEST = "theorem t : 2 + 2 = 4 := by\n  decide"


# -- honest proofs pass, with the replayed environment's axioms ---------------------------------

@BOTH
def test_an_honest_proof_passes_with_the_axioms_of_the_replayed_environment(stage, pin):
    [result] = stage(pin).check([job(HONEST)], STANDARD)
    assert result.status == "passed", result.reason
    assert set(result.axioms) == STANDARD
    assert pin.commit[:8] in result.reason


@BOTH
def test_helpers_and_binders_pass(stage, pin):
    statement = "theorem t2 (n : ℕ) (h : 0 < n) : n + 0 = n := by"
    body = "theorem helper (n : ℕ) : n + 0 = n := rfl\n\n" + statement + "\n  exact helper n"
    [result] = stage(pin).check([job(body, statement)], STANDARD)
    assert result.status == "passed", result.reason


REFUSED_PINS_STANDINS = {t: p for t, p in SAFEVERIFY_PINS.items() if p.dialect == "2026"}
RECURSIVE = ("def prover_count (n : Nat) : Nat := if n = 0 then 0 else prover_count (n - 1) + 1\n\n"
             "theorem t : 2 + 2 = 4 := by\n  decide")


def test_an_honest_proof_with_a_recursive_def_passes_with_its_unsafe_rec_shim(stage, verify_config):
    """#39: Lean adds `f._unsafe_rec` (safety `partial`) for a recursive `def` (the `lean -o`
    stand-in writes it: fake_kernel_model.unsafe_rec_shims); prover_check exempts it from the
    partial check only, and so does the 2026 SafeVerify stand-in (`isCompilerUnsafeRecName`, with
    --disallow-partial); the 2024 ones are never run by the stage (they fail every fast-path module
    on `_prover_trusted`'s hole axiom)."""
    import fake_kernel_model

    _, constants, _ = fake_kernel_model.parse_module(RECURSIVE)
    shims = [c for c in fake_kernel_model.unsafe_rec_shims(constants) if c["name"].endswith("._unsafe_rec")]
    assert [(c["name"], c["partial"], c["unsafe"]) for c in shims] == [("prover_count._unsafe_rec", True, False)]
    [result] = stage().check([job(RECURSIVE)], STANDARD)
    assert result.status == "passed", result.reason
    for toolchain, sv in REFUSED_PINS_STANDINS.items():   # the 2026 SafeVerify stand-ins, run directly
        s = stage()
        s.pin, s.batch_size = sv, 1
        s.checker_command = [sys.executable, str(TESTS / "fake_safe_verify.py"), "--pin", sv.commit]
        [result] = s.check([job(RECURSIVE)], STANDARD)
        assert result.status == "passed", (toolchain, result.reason)
    # a recursive def in the trusted header: its shim is in both modules and compared with neither
    header = HEADER + "\ndef prover_hdr (n : Nat) : Nat := if n = 0 then 0 else prover_hdr (n - 1)\n"
    [result] = stage().check([job(HONEST, header=header)], STANDARD)
    assert result.status == "passed", result.reason
    # a `partial def` is another matter: refused (its implementation is an unsafe constant in Lean)
    [result] = stage().check([job(RECURSIVE.replace("def prover_count", "partial def prover_count"))], STANDARD)
    assert result.status == "rejected" and "partial definition" in result.reason, result.reason


@BOTH
def test_a_target_inside_a_namespace_the_trusted_header_leaves_open(stage, pin):
    header = HEADER + "\nnamespace Game\n\ndef solution : ℕ := 3\n"
    statement = "theorem t : 1 + 2 = 3 := by"
    [result] = stage(pin).check([job(statement + "\n  decide", statement, header=header)], STANDARD)
    assert result.status == "passed", result.reason


# -- forged fast-path answers: the fresh elaboration or the checker says no ---------------------

@BOTH
def test_a_false_statement_the_fast_path_called_verified_does_not_elaborate_afresh(stage, pin):
    statement = "theorem f : 2 + 2 = 5 := by"
    [result] = stage(pin).check([job(statement + "\n  decide", statement)], STANDARD)
    assert result.status == "rejected"
    assert "does not elaborate in a fresh Lean process" in result.reason


@BOTH
def test_sorry_hidden_from_the_fast_path_is_caught_by_the_axiom_check(stage, pin):
    [result] = stage(pin).check([job("theorem t : 2 + 2 = 4 := by\n  sorry")], STANDARD)
    assert result.status == "rejected"
    assert "sorryAx" in result.reason or "disallowed axioms" in result.reason


@BOTH
@pytest.mark.parametrize("forge, expect", [
    # code run during elaboration wrote the module; the checker alone must say no
    ("ignore_errors", ["the kernel refused the submission's replay"]),
    ("skip_kernel", ["the kernel refused the submission's replay"]),
    # (the stand-in forges the module's last theorem: the fast path's `_prover_same`, whose value
    # is the target, written `_root_._prover_same` in the model; {} is its name)
    ("axiom", ["theorem {} depends on axioms outside propext, Quot.sound, Classical.choice: and axioms of the submission"]),
    ("retype", ["theorem {} of the trusted target has another type in the submission"]),
    ("drop", ["theorem {} of the trusted target is not in the submission"]),
    ("unsafe", ["of the submission is unsafe"]),
])
def test_a_forged_olean_is_rejected_by_the_checker(stage, pin, forge, expect):
    statement = "theorem f : 2 + 2 = 5 := by" if forge == "ignore_errors" else "theorem f : 2 + 2 = 4 := by"
    [result] = stage(pin).check([job(f"{statement}\n  exact fake_forge_{forge}", statement)], STANDARD)
    assert result.status == "rejected", result.reason
    assert any(e.format("_root_._prover_same") in result.reason for e in expect), result.reason
    assert result.reason.startswith(f"kernel check ({pin.checker} {pin.commit[:8]})")


@BOTH
def test_forged_imports_are_refused_by_every_pinned_checker(stage, pin):
    [result] = stage(pin).check([job(HONEST.replace("decide", "exact fake_forge_imports"))], STANDARD)
    assert result.status == "rejected", result.reason
    assert "the submission's imports are not the trusted header's" in result.reason


@BOTH
def test_a_body_with_an_import_is_refused_before_lean(stage, pin):
    [result] = stage(pin).check([job("import Evil\n\n" + HONEST)], STANDARD)
    assert result.status == "rejected" and "has an `import` line" in result.reason


@BOTH
@pytest.mark.parametrize("forge, expect", [("garbage", "the submission's .olean cannot be read"), ("corrupt", "SIGSEGV")])
def test_an_unreadable_olean_is_an_error_never_a_pass(stage, pin, forge, expect):
    [result] = stage(pin).check([job(HONEST.replace("decide", f"exact fake_forge_{forge}"))], STANDARD)
    assert result.status == "error"
    assert expect in result.reason


@BOTH
def test_the_configured_axioms_are_enforced_on_the_replayed_list(stage, pin):
    [result] = stage(pin).check([job(HONEST)], {"propext", "Quot.sound"})
    assert result.status == "rejected"
    assert "depends on axioms outside verify.allowed_axioms: Classical.choice" in result.reason


# -- faults: crash, timeout, garbage, a missing checker ------------------------------------------

def test_a_hanging_elaboration_is_an_error(stage):
    s = stage(kernel_check_timeout_s=1.0)
    [result] = s.check([job(HONEST.replace("decide", "exact fake_hang"))], STANDARD)
    assert result.status == "error"
    assert "no answer before the deadline" in result.reason


def test_a_crashing_elaboration_is_an_error(stage):
    [result] = stage().check([job(HONEST.replace("decide", "exact fake_segfault"))], STANDARD)
    assert result.status == "error"
    assert "SIGSEGV" in result.reason


@pytest.mark.parametrize("script, expect", [
    ("import time; time.sleep(60)", "no answer before the deadline"),
    ("print('Finished with no errors.', end='')", "did not answer every pair of its batch"),
    ("import sys; sys.exit(0)", "did not answer every pair of its batch (0 lines)"),
    ("print('checked 1 imports 1')", "did not answer every pair"),      # the pair's line missing
    ("import sys; sys.exit(3)", "exited with code 3"),
    ("import sys; sys.stderr.write('uncaught exception: x\\n'); sys.exit(1)", "exited with code 1"),
    ("print('pair 0 passed'); print('checked 1 imports 1')", "no readable axiom list for a single theorem `t`"),
    ("print('pair 0 fine'); print('checked 1 imports 1')", "printed a line it never prints, or out of order"),
    ("print('axioms 0 t propext'); print('pair 0 passed'); print('checked 1 imports 2')",
     "did not answer every pair"),                                                   # two imports: not our checker
    ("print('axioms 0 t propext'); print('pair 0 rejected x'); print('checked 1 imports 1')",
     "answered pair 0 with fields it never prints"),                                 # axioms, then no pass
    ("print('axioms 1 t propext'); print('pair 0 passed'); print('checked 1 imports 1')",
     "printed a line it never prints, or out of order"),
    # a line break Python's splitlines() sees and the checker does not: one line, never two answers
    ("print('axioms 0 t propext\\u2028pair 0 passed'); print('pair 0 passed'); print('checked 1 imports 1')",
     "printed a line it never prints"),
    ("print('pair 0 rejected x\\x85pair 0 passed'); print('checked 1 imports 1')", None),
])
def test_checker_output_we_cannot_read_is_an_error(stage, verify_config, script, expect):
    # the deadline under test only for the checker that never answers; one that does gets the hang guard
    s = stage(kernel_check_timeout_s=2.0 if "sleep" in script else PATIENCE_S)
    s.checker_command = [sys.executable, "-c", script]
    [result] = s.check([job(HONEST)], STANDARD)
    if expect is None:   # one rejection whose reason holds U+0085, never a pass
        assert result.status == "rejected" and "x ⏎ pair 0 passed" in result.reason, result.reason
        return
    assert result.status == "error", result.reason
    assert expect in result.reason


def test_a_checker_that_cannot_start_stops_the_run(stage):
    s = stage()
    s.checker_command = ["/nonexistent/safe_verify"]
    with pytest.raises(BackendError, match="cannot start"):
        s.check([job(HONEST)], STANDARD)


def test_a_trusted_statement_that_does_not_compile_is_the_records_error(stage):
    [result] = stage().check([job(HONEST, "theorem t : fake_error = 4 := by")], STANDARD)
    assert result.status == "error"
    assert "the trusted statement does not compile" in result.reason


def test_no_pin_for_the_toolchain_refuses_to_start(verify_config):
    config = verify_config(lean_toolchain="leanprover/lean4:v4.3.0")
    with pytest.raises(BackendError, match="no kernel checker is pinned for verify.lean_toolchain"):
        KernelStage(config)


def test_a_policy_the_checker_cannot_hold_refuses_to_start(verify_config):
    with pytest.raises(BackendError, match="allow_native_decide"):
        KernelStage(verify_config(allow_native_decide=True))
    with pytest.raises(BackendError, match="Lean.ofReduceBool never passes"):
        KernelStage(verify_config(allowed_axioms=["propext", "Lean.ofReduceBool"]))


# -- steps, data, parallelism --------------------------------------------------------------------

class CountingRunner(LocalRunner):
    def __init__(self):
        super().__init__(None)
        self.calls: list[tuple[list[str], dict]] = []

    def run(self, argv, inputs, outputs, timeout_s, what="command"):
        self.calls.append((list(argv), {k: len(v) for k, v in inputs.items()}))
        result = super().run(argv, inputs, outputs, timeout_s, what)
        self.imports_said = getattr(self, "imports_said", 0) + result.stderr.count("prover_check: imported the header")
        return result


def test_the_target_compiles_once_per_problem_and_a_batch_is_checked_with_one_header_import(verify_config):
    runner = CountingRunner()
    config = verify_config(lean_command=FAKE_LEAN, kernel_checker_command=checker_command(PIN_OWN), workers=3)
    stage = KernelStage(config, runner=runner)
    results = stage.check([job(HONEST)] * 6, STANDARD)
    assert [r.status for r in results] == ["passed"] * 6
    lean_runs = [inputs for argv, inputs in runner.calls if argv[:3] == FAKE_LEAN]
    checker_runs = [(argv, inputs) for argv, inputs in runner.calls
                    if argv[:4] == ["env", *CHECKER_ENV, *FAKE_CHECKER[:2]]]
    assert len(lean_runs) == 1 + 6          # the target once, each proof once
    assert all(set(inputs) == {"Proof.lean"} for inputs in lean_runs)
    assert len(checker_runs) == 1           # one process for the batch, given only files
    argv, inputs = checker_runs[0]
    assert set(inputs) == {f"{side}{k}.olean" for k in range(6) for side in "TP"} and argv[4:] == ["{dir}"]
    assert stage.header_imports == 1 and runner.imports_said == 1   # counted by the stand-in, said on stderr

    config.kernel_batch_size = 4            # 6 proofs: two processes, two imports
    stage = KernelStage(config, runner=runner)
    assert [r.status for r in stage.check([job(HONEST)] * 6, STANDARD)] == ["passed"] * 6
    assert (stage.checker_runs, stage.header_imports) == (2, 2)
    assert runner.imports_said == 3


def test_proofs_under_different_headers_never_share_a_checker_process(verify_config):
    """A checker process imports one header (the stand-in refuses a pair whose target was compiled
    under another, as our checker does): one check call with proofs of two headers, as a file mixing
    miniF2F and PutnamBench rows gives, is two processes, one import each."""
    runner = CountingRunner()
    config = verify_config(lean_command=FAKE_LEAN, kernel_checker_command=checker_command(PIN_OWN), workers=2)
    other = "import Mathlib\n\nopen Real\n"
    stage = KernelStage(config, runner=runner)
    jobs = [job(HONEST), job(HONEST, header=other), job(HONEST), job(HONEST, header=other)]
    assert [r.status for r in stage.check(jobs, STANDARD)] == ["passed"] * 4
    assert (stage.checker_runs, stage.header_imports) == (2, 2)


@pytest.mark.parametrize("toolchain", sorted(REFUSED_PINS))
def test_the_safeverify_2026_pins_are_refused_naming_what_they_do_not_check(verify_config, toolchain):
    """#39: SafeVerify at b291b588/241dfb0d checks Nat literals only for a `-`, only on declarations
    the target does not name, and skips partial constants without --disallow-partial; prover_check
    has no evidence at 4.27/4.29. The stage refuses to start rather than pass what it does not check."""
    config = verify_config(lean_toolchain=f"leanprover/lean4:{toolchain}", lean_command=FAKE_LEAN,
                           kernel_checker_command=checker_command(SAFEVERIFY_PINS[toolchain]))
    with pytest.raises(BackendError, match=r"refuses verify.lean_toolchain .*non-canonical positive literal.*"
                                           r"--disallow-partial"):
        KernelStage(config)
    assert toolchain not in PINS and pin_for(config.lean_toolchain) is None


def test_the_safeverify_argv_passes_disallow_partial_and_the_checker_env():
    argv = checker_argv(["safe_verify"], PIN_2026)
    assert argv[:3] == ["env", "LEAN_ABORT_ON_PANIC=1", "safe_verify"] and "--disallow-partial" in argv
    assert checker_argv(["prover_check"], PIN_OWN) == ["env", "LEAN_ABORT_ON_PANIC=1", "prover_check", "{dir}"]


def test_a_proof_that_crashes_the_checker_is_split_out_of_its_batch(stage):
    bodies = [HONEST, HONEST.replace("decide", "exact fake_forge_corrupt"), HONEST, HONEST]
    s = stage(workers=1)
    results = s.check([job(b) for b in bodies], STANDARD)
    assert [r.status for r in results] == ["passed", "error", "passed", "passed"]
    assert "SIGSEGV" in results[1].reason
    assert s.checker_runs == 5   # 4 -> 2 + 2 -> the crashing half as 1 + 1


def test_results_come_back_in_order_with_their_own_verdicts(stage):
    bodies = [HONEST, "theorem t : 2 + 2 = 4 := by\n  sorry", HONEST.replace("decide", "exact fake_forge_garbage")]
    results = stage(workers=3).check([job(b) for b in bodies], STANDARD)
    assert [r.status for r in results] == ["passed", "rejected", "error"]
    assert all(r.time_s > 0 for r in results)


def test_local_runner_gives_each_call_a_fresh_directory_and_removes_it(tmp_path):
    script = ("import os, sys; d = sys.argv[1]; print(sorted(os.listdir(d))); "
              "open(os.path.join(d, 'out.bin'), 'wb').write(b'data'); print(os.getcwd())")
    runner = LocalRunner(str(tmp_path))
    first = runner.run([sys.executable, "-c", script, "{dir}"], {"in.txt": b"x"}, ("out.bin", "missing"), 10)
    second = runner.run([sys.executable, "-c", script, "{dir}"], {}, ("out.bin",), 10)
    assert first.exit_code == 0 and first.stdout.splitlines()[0] == "['in.txt']"
    assert second.stdout.splitlines()[0] == "[]"     # nothing left from the first call
    assert first.stdout.splitlines()[1] == str(tmp_path)  # run where `lake env` finds the project
    assert first.files == {"out.bin": b"data"}
    assert not any(p.name.startswith("prover-kernel-") for p in Path(os.environ.get("TMPDIR", "/tmp")).iterdir()
                   if p.is_dir() and (p / "in.txt").exists())
    with pytest.raises(ValueError):
        runner.run([sys.executable, "-c", ""], {"../escape": b""}, (), 5)


# -- reading the tools' answers ------------------------------------------------------------------

def test_reading_lean_o():
    ok = read_elaboration(RunResult(exit_code=0), wrote_olean=True)
    assert ok is None
    failed = read_elaboration(RunResult(exit_code=1, stdout="/tmp/x/Proof.lean:3:2: error: unsolved goals\n⊢ False\n"),
                              wrote_olean=False)
    assert failed.status == "rejected" and "Proof.lean:3:2: unsolved goals" in failed.reason
    assert read_elaboration(RunResult(exit_code=1, stderr="Unknown command line option"), False).status == "error"
    assert read_elaboration(RunResult(exit_code=0), wrote_olean=False).status == "error"
    assert read_elaboration(RunResult(exit_code=None, signal=9), wrote_olean=False).status == "error"


def test_reading_a_2024_report_needs_the_target_block_and_its_axioms():
    good = ("------------------\nReplaying /d/Target.olean\nFinished imports\nFinished replay\n---\ntheorem\nt\n"
            "2 + 2 = 4\n#[sorryAx]\n------------------\nReplaying /d/Proof.olean\nFinished imports\n"
            "Finished replay\n---\ntheorem\nt\n2 + 2 = 4\n#[propext]\nFinished with no errors.\n")
    result = read_checker(SAFEVERIFY_PINS["v4.15.0"], RunResult(exit_code=0, stdout=good), "t", frozenset(STANDARD))
    assert (result.status, result.axioms) == ("passed", ["propext"])
    for broken in (good.replace("#[propext]", "propext"), good.replace("---\ntheorem\nt\n2 + 2 = 4\n#[propext]\n", ""),
                   good.replace("Replaying /d/Target.olean", "Replaying /d/Other.olean"),
                   good.replace("\nt\n2 + 2 = 4\n#[sorryAx]", "\nu\n2 + 2 = 4\n#[sorryAx]")):
        assert read_checker(SAFEVERIFY_PINS["v4.15.0"], RunResult(exit_code=0, stdout=broken), "t",
                            frozenset(STANDARD)).status == "error"


def test_reading_a_2026_report_needs_the_saved_outcome():
    stderr = "Replaying /d/Target.olean\nReplaying /d/Proof.olean\nSafeVerify check passed.\n"
    report = b'[["t", {"targetInfo": {"constInfo": {"kind": "theorem"}, "axioms": ["sorryAx"]}, ' \
             b'"solutionInfo": {"constInfo": {"kind": "theorem"}, "axioms": ["propext"]}, "failureMode": null}]]'
    result = read_checker(PIN_2026, RunResult(exit_code=0, stderr=stderr, files={"report.json": report}), "t",
                          frozenset(STANDARD))
    assert (result.status, result.axioms) == ("passed", ["propext"])
    for files in ({}, {"report.json": b"{"}, {"report.json": report.replace(b"null", b'"thmType"')},
                  {"report.json": report.replace(b'"t"', b'"u"')}):
        assert read_checker(PIN_2026, RunResult(exit_code=0, stderr=stderr, files=files), "t",
                            frozenset(STANDARD)).status == "error"
    # a failure that happened while replaying the *target* is ours, not the proof's
    target_fail = "Replaying /d/Target.olean\nuncaught exception: (kernel) declaration type mismatch, 'x' has type\n"
    assert read_checker(PIN_2026, RunResult(exit_code=1, stderr=target_fail), "t",
                        frozenset(STANDARD)).status == "error"


# -- the verdict -----------------------------------------------------------------------------------

def test_kernel_verdict_mapping():
    fast = Verdict("verified", "all checks passed", [{"severity": "info", "data": "x"}], ["forged"], 1.0)
    passed = kernel_verdict(fast, KernelResult("passed", "kernel check passed (SafeVerify 577e9531)", ["propext"], 2.5))
    assert (passed.status, passed.axioms, passed.time_s) == ("verified", ["propext"], 3.5)
    assert passed.reason == "all checks passed; kernel check passed (SafeVerify 577e9531)"
    rejected = kernel_verdict(fast, KernelResult("rejected", "kernel check (SafeVerify): no", None, 1.0))
    assert (rejected.status, rejected.axioms) == ("rejected", None)    # never the fast path's axioms
    assert kernel_verdict(fast, KernelResult("error", "kernel check: crash")).status == "error"
    not_verified = Verdict("rejected", "Lean error")
    assert kernel_verdict(not_verified, KernelResult("passed", "x")) is not_verified
    assert kernel_verdict(fast, None) is fast


def test_pins_are_one_per_toolchain_and_cover_the_default():
    from prover_cli.config import VerifyConfig

    assert pin_for(VerifyConfig().lean_toolchain) is PIN_OWN
    assert {p.dialect for p in PINS.values()} == {"batch"}   # no 2024 SafeVerify: it takes the attacks; 2026 refused
    assert all(len(p.commit) == 40 and p.toolchain == key for key, p in PINS.items()), PINS
    assert set(PINS) | set(REFUSED_PINS) == set(SAFEVERIFY_PINS) and not set(PINS) & set(REFUSED_PINS)
    assert set(PINS) == {t for t, p in SAFEVERIFY_PINS.items() if p.dialect == "2024"}
    assert all(p.imports == "exact" for p in PINS.values())
    assert len({p.commit for p in PINS.values()}) == len(PINS)   # each toolchain's build is its own


def test_config_refuses_a_policy_the_checker_cannot_hold():
    from prover_cli.config import load_config

    with pytest.raises(ConfigError, match="verify.allow_native_decide=true: the kernel checker"):
        load_config(None, ["verify.allow_native_decide=true"])
    with pytest.raises(ConfigError, match="never passes"):
        load_config(None, ['verify.allowed_axioms=["propext", "Classical.choice", "Quot.sound", "Foo.ax"]'])
    with pytest.raises(ConfigError, match="verify.kernel_checker_command"):
        load_config(None, ["verify.kernel_checker_command=[]"])
    assert load_config(None, ["verify.allow_native_decide=true", "verify.kernel_check=false"]).verify.allow_native_decide
    assert load_config(None, ['verify.allowed_axioms=["propext"]']).verify.kernel_check   # narrower is fine


def test_the_checker_stand_in_speaks_every_pinned_commit_and_only_those():
    sys.path.insert(0, str(TESTS))
    import fake_safe_verify

    assert set(fake_safe_verify.DIALECTS) == {p.commit[:8] for p in SAFEVERIFY_PINS.values()}
    for pin in SAFEVERIFY_PINS.values():
        dialect, version = fake_safe_verify.DIALECTS[pin.commit[:8]]
        assert dialect == pin.dialect and f"v{version}" == pin.toolchain


# -- prover doctor ----------------------------------------------------------------------------------

def fake_checkout(root: Path, toolchain: str, head: str) -> Path:
    """A SafeVerify checkout as the image builds it: the binary in .lake/build/bin, lean-toolchain, .git."""
    binary = root / ".lake" / "build" / "bin" / "safe_verify"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    (root / "lean-toolchain").write_text(f"leanprover/lean4:{toolchain}\n")
    (root / ".git" / "refs" / "heads").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/pinned\n")
    (root / ".git" / "refs" / "heads" / "pinned").write_text(head + "\n")
    return binary


def own_checker_build(root: Path, toolchain: str, edit: str = "") -> Path:
    """Our checker as the image builds it: its source, lean-toolchain, the binary in .lake/build/bin."""
    from prover_cli.verify.kernel.pins import own_checker_sources

    binary = root / ".lake" / "build" / "bin" / "prover_check"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    (root / "lean-toolchain").write_text(f"leanprover/lean4:{toolchain}\n")
    for name, text in own_checker_sources(toolchain).items():
        (root / name).write_text(text + (edit if name == "Main.lean" else ""))
    return binary


def test_doctor_reports_the_checker_found_its_version_and_toolchain(tmp_path, monkeypatch):
    from prover_cli.config import VerifyConfig
    from prover_cli.doctor import check_kernel_checker

    config = VerifyConfig()
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    missing = check_kernel_checker(config)
    assert not missing.ok and "`prover_check` not found on PATH" in missing.detail and PIN_OWN.commit[:12] in missing.detail

    binary = own_checker_build(tmp_path / "pc", "v4.15.0")
    monkeypatch.setenv("PATH", f"{binary.parent}:/usr/bin:/bin")
    found = check_kernel_checker(config)
    assert found.ok and "prover_cli/verify/kernel/checker" in found.detail and str(binary) in found.detail
    assert "warning: " in found.detail and "has not been compiled or run where it was written" in found.detail

    other = own_checker_build(tmp_path / "pc2", "v4.21.0")
    monkeypatch.setenv("PATH", f"{other.parent}:/usr/bin:/bin")
    wrong = check_kernel_checker(config)
    assert not wrong.ok and "built for Lean v4.21.0, verify.lean_toolchain is v4.15.0" in wrong.detail

    old = own_checker_build(tmp_path / "pc3", "v4.15.0", edit="\n-- another version\n")
    monkeypatch.setenv("PATH", f"{old.parent}:/usr/bin:/bin")
    assert "not the pinned" in check_kernel_checker(config).detail

    config.lean_toolchain = "leanprover/lean4:v4.27.0"   # SafeVerify's 2026 pin: refused (#39)
    assert not check_kernel_checker(config).ok

    config.kernel_check = False
    assert check_kernel_checker(config).ok and "off" in check_kernel_checker(config).detail


@BOTH
def test_doctor_runs_the_kernel_canary(verify_config, pin):
    from prover_cli.doctor import check_kernel_canary

    config = verify_config(lean_toolchain=f"leanprover/lean4:{pin.toolchain}", lean_command=FAKE_LEAN,
                           kernel_checker_command=checker_command(pin), workers=3)
    check = check_kernel_canary(config)
    assert check.ok, check.detail
    canaries = 5 + (8 if pin.imports == "exact" else 7)   # and the public attacks the pin is held to
    assert f"{canaries} canaries as expected" in check.detail and "through the stage" in check.detail
    # a checker that lets everything through breaks the rules the canary names
    config.kernel_checker_command = [sys.executable, "-c", "print('Finished with no errors.')"]
    broken = check_kernel_canary(config)
    assert not broken.ok and "kernel canary 'honest'" in broken.detail


# -- through the engine: both backends feed the same stage ------------------------------------------

FORGING_REPL = [sys.executable, str(TESTS / "forging_repl.py")]
AMC = "theorem amc_p1 (x : ℝ) (h₀ : 2 * x = 4) : x = 2 := by"
FALSE = "theorem false_p (h : True) : 2 + 2 = 5 := by"
FORGED_CASES = {
    # id: (statement, proof) — each fools the fast path in its own way
    "hidden error": (AMC, "  nlinarith [fake_error]"),             # the forged REPL says "no messages"
    "hidden sorryAx": (AMC, "  exact fake_axiom_sorryAx"),          # the forged `#print axioms` says standard
    "false statement": ("theorem false_q : 2 + 2 = 5 := by", "  decide"),  # the forged REPL hides Lean's error
    "kernel skipped": (AMC, "  linarith [fake_forge_skip_kernel]"),  # code in elaboration adds an unchecked theorem
    "axiom injected": (AMC, "  linarith [fake_forge_axiom]"),        # code in elaboration adds an axiom
}


def engine_records() -> list[dict]:
    rows = [{"id": "honest", "formal_statement": AMC, "proof": "  linarith"}]
    rows += [{"id": key, "formal_statement": statement, "proof": proof}
             for key, (statement, proof) in FORGED_CASES.items()]
    return rows


@pytest.fixture
def backend_config(verify_config, monkeypatch):
    """(config factory, context) for backend `repl` (the forging REPL as the pool's REPL) or
    `kimina` (the Kimina stand-in server running the forging REPL)."""
    import contextlib

    import test_verify_kimina

    def make(backend: str, **overrides):
        if backend == "repl":
            return verify_config(repl_command=FORGING_REPL, **overrides), contextlib.nullcontext()
        monkeypatch.setattr(test_verify_kimina, "fake_repl_command", lambda *args: FORGING_REPL + list(args))
        server = test_verify_kimina.FakeKimina()
        return verify_config(backend="kimina", kimina_url=server.url, **overrides), server
    return make


@pytest.mark.parametrize("backend", ["repl", "kimina"])
def test_forged_fast_path_answers_are_not_verified_on_either_backend(backend_config, backend):
    from prover_cli.verify import verify_records

    config, server = backend_config(backend)
    with server:
        verdicts = {v["id"]: v for v in verify_records(engine_records(), config)}
        config.kernel_check = False
        fast_only = {v["id"]: v["verdict"] for v in verify_records(engine_records(), config)}
    # without the stage, every forgery passes: the fast path's answers were forged
    assert set(fast_only.values()) == {"verified"}, fast_only
    honest = verdicts.pop("honest")
    assert honest["verdict"] == "verified", honest["reason"]
    assert honest["reason"] == f"all checks passed; kernel check passed (prover_check {PIN_OWN.commit[:8]})"
    assert honest["verifier"]["kernel_check"]["commit"] == PIN_OWN.commit
    for key, verdict in verdicts.items():
        assert verdict["verdict"] == "rejected", (key, verdict["reason"])
        assert verdict["reason"].startswith("kernel check"), (key, verdict["reason"])
    assert "does not elaborate in a fresh Lean process" in verdicts["hidden error"]["reason"]
    assert "does not elaborate in a fresh Lean process" in verdicts["false statement"]["reason"]
    assert "axioms outside propext, Quot.sound, Classical.choice: sorryAx" in verdicts["hidden sorryAx"]["reason"]
    assert "the kernel refused the submission's replay" in verdicts["kernel skipped"]["reason"]
    assert "Classical.choice: and axioms of the submission" in verdicts["axiom injected"]["reason"]
    assert verdicts["hidden sorryAx"]["axioms"] is None   # never the forged list


def test_kernel_check_off_is_a_warning_in_the_summary_and_recorded_everywhere(verify_config, tmp_path):
    import json

    from prover_cli.config import Config
    from prover_cli.verify import verify_file
    from prover_cli.verify.engine import KERNEL_CHECK_OFF_WARNING, policy_digest
    from prover_cli.verify.kernel.pins import pin_warning

    proofs = tmp_path / "p.jsonl"
    proofs.write_text(json.dumps({"id": "a", "formal_statement": AMC, "proof": "  linarith"}) + "\n")
    config = Config()
    config.verify = verify_config()
    on = verify_file(config, proofs_path=proofs, out_path=tmp_path / "on.jsonl")
    # the default toolchain's checker is ours, Lean code no test here ran: said, not hidden
    assert on["verified"] == 1 and on["warnings"] == [pin_warning(config.verify)]
    assert "v4.15.0" in on["warnings"][0] and "has not been compiled" in on["warnings"][0]
    digest_on = policy_digest(config.verify)
    config.verify.kernel_check = False
    off = verify_file(config, proofs_path=proofs, out_path=tmp_path / "off.jsonl")
    assert off["warnings"] == [KERNEL_CHECK_OFF_WARNING]
    assert {"title": "warnings", "columns": ["warning"], "rows": [[KERNEL_CHECK_OFF_WARNING]]} in off["tables"]
    [line] = [json.loads(x) for x in (tmp_path / "off.jsonl").read_text().splitlines()]
    assert line["verifier"]["kernel_check"] is False and line["reason"] == "all checks passed"
    assert policy_digest(config.verify) != digest_on
    # resume under the other setting rechecks the line
    config.verify.kernel_check = True
    again = verify_file(config, proofs_path=proofs, out_path=tmp_path / "off.jsonl")
    assert (again["rechecked"], again["warnings"]) == (1, [pin_warning(config.verify)])


def test_the_kernel_canary_runs_before_the_first_pass_and_refuses_a_broken_checker(verify_config, tmp_path,
                                                                                  monkeypatch):
    from prover_cli.verify import verify_records

    monkeypatch.setenv("PROVER_CANARY_CACHE", str(tmp_path / "cache"))
    config = verify_config(canary=True)
    monkeypatch.setattr("prover_cli.verify.lean.canary.ensure_canary", lambda pool: None)   # the fast path's: elsewhere
    rejected_only = [{"id": "x", "formal_statement": AMC, "proof": "  nlinarith [fake_error]"}]
    assert verify_records(rejected_only, config)[0]["verdict"] == "rejected"
    assert not (tmp_path / "cache").exists()      # no pass to check: the kernel canary did not run
    assert verify_records(engine_records()[:1], config)[0]["verdict"] == "verified"
    assert len(list((tmp_path / "cache").glob("kernel-*.json"))) == 1
    config.kernel_checker_command = [sys.executable, "-c", "print('Finished with no errors.')"]
    with pytest.raises(BackendError, match="verification refuses to run: rule `an honest proof passes"):
        verify_records(engine_records()[:1], config)


@pytest.mark.parametrize("backend", ["repl", "kimina"])
def test_the_kernel_canary_fools_the_fast_path_and_the_stage_rejects(backend_config, backend, tmp_path,
                                                                       monkeypatch):
    """The canary's case: a REPL that says "no errors, standard axioms" for a false statement (the
    forging stand-in), through a fresh fast path of the configured backend; the stage rejects it."""
    import json

    from prover_cli.verify import verify_records
    from prover_cli.verify.kernel.kernel_canary import FOOLED

    monkeypatch.setenv("PROVER_CANARY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("prover_cli.verify.lean.canary.ensure_canary", lambda pool: None)  # it would see the forgery too
    config, server = backend_config(backend, canary=True)
    with server:
        assert verify_records(engine_records()[:1], config)[0]["verdict"] == "verified"
    [stored] = (tmp_path / "cache").glob("kernel-*.json")
    fooled = next(r for r in json.loads(stored.read_text())["results"] if r["canary"] == FOOLED)
    assert (fooled["fast_path"], fooled["got"], fooled["ok"]) == ("verified", "rejected", True)
    assert "does not elaborate in a fresh Lean process" in fooled["reason"]


def test_the_fooled_case_rejected_by_an_honest_fast_path_needs_no_stage(stage):
    from prover_cli.verify.kernel.kernel_canary import FOOLED, run_kernel_canary

    honest = run_kernel_canary(stage(), HEADER, fast_path=lambda c: Verdict("rejected", "Lean error: decide failed"))
    fooled = next(r for r in honest if r["canary"] == FOOLED)
    assert (fooled["fast_path"], fooled["got"], fooled["ok"], fooled["time_s"]) == ("rejected", "rejected", True, 0.0)
    assert all(r["ok"] for r in honest)


def test_the_stand_in_models_kernel_decides_only_closed_natural_number_arithmetic():
    sys.path.insert(0, str(TESTS))
    from fake_kernel_model import closed_truth

    assert closed_truth(": 2 + 2 = 4") is True and closed_truth(": 2 + 2 = 5") is False
    assert closed_truth(": 3 - 5 = 0") is True            # ℕ subtraction truncates
    assert closed_truth(": 7 / 2 = 3") is True and closed_truth(": 7 % 0 = 7") is True
    assert closed_truth(": (2 + 3) * 4 ≤ 20") is True and closed_truth(": 2 ^ 10 ≠ 1024") is False
    assert closed_truth(": True") is True and closed_truth(": False") is False
    for undecided in ("(x : ℕ) : x = x", ": 2 + 2 = 4 ∧ True", ": (2 : ℝ) = 2", ": Real.sqrt 4 = 2", ": 2 ^ 100 = 1"):
        assert closed_truth(undecided) is None, undecided


def test_a_target_that_failed_for_the_machine_is_compiled_again(verify_config):
    """A timeout or a signal while compiling the trusted target says nothing about the statement:
    the next proof of the problem compiles it again (Lean's error on it would be kept)."""
    class FlakyRunner(CountingRunner):
        def run(self, argv, inputs, outputs, timeout_s, what="command"):
            if argv[:3] == FAKE_LEAN and not self.calls:   # the first target compile: killed
                self.calls.append((list(argv), {}))
                return RunResult(exit_code=None, signal=9)
            return super().run(argv, inputs, outputs, timeout_s, what)

    runner = FlakyRunner()
    stage = KernelStage(verify_config(lean_command=FAKE_LEAN, kernel_checker_command=checker_command(PIN_OWN)),
                        runner=runner)
    first = stage.check_one(job(HONEST), STANDARD)
    assert first.status == "error" and "SIGKILL" in first.reason
    assert stage.check_one(job(HONEST), STANDARD).status == "passed"
    broken = job(HONEST, "theorem t : fake_error = 4 := by")
    assert stage.check_one(broken, STANDARD).status == "error"
    calls = len(runner.calls)
    assert stage.check_one(broken, STANDARD).status == "error" and len(runner.calls) == calls   # kept: no new compile


def test_an_interrupt_reports_no_verdict_for_checks_it_killed(stage):
    """Ctrl-C while a kernel check runs: its process is killed and no verdict is written (a kill of
    ours is never the proof's `error`); verdicts already known were reported as they came."""
    import time

    from prover_cli.verify.kernel.batching import second_stage
    from prover_cli.verify.text.statement import Candidate

    reported = []
    # batches of one, so the quick proof's verdict does not wait for the hanging one's batch;
    # kernel_check_timeout_s: the hang guard, what the bug would wait out
    s = stage(workers=2, kernel_batch_size=1)
    fast = Verdict("verified", "all checks passed")

    def candidate(body):
        return Candidate(id="c", header=HEADER, body=body, target="t", statement="theorem t : 2 + 2 = 4 := by")

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with second_stage(s, STANDARD) as second:
            second.submit(candidate(HONEST), fast, ("quick", {}), lambda *a: reported.append(a))
            second.submit(candidate(HONEST.replace("decide", "exact fake_hang")), fast, ("hangs", {}),
                          lambda *a: reported.append(a))
            wait_until(lambda: reported, what="the quick check's verdict")   # reported from its own thread
            raise KeyboardInterrupt
    assert [key for key, _, _ in reported] == ["quick"] and reported[0][2].status == "verified"
    assert time.monotonic() - start < s.timeout_s   # the hanging `lean -o` was killed, not waited for


def test_the_pin_warning_names_what_each_pin_rests_on():
    from prover_cli.config import VerifyConfig
    from prover_cli.verify.kernel.pins import PINS, pin_warning

    config = VerifyConfig()
    for toolchain, pin in PINS.items():
        config.lean_toolchain = f"leanprover/lean4:{toolchain}"
        warning = pin_warning(config)
        if pin.dialect == "batch":   # our checker: unrun Lean code until the doctor ran it
            assert f"for Lean {toolchain} is prover_check" in warning and "has not been compiled" in warning
        else:
            assert f"Lean {toolchain} ({pin.branch}) accepts a proof module that imports more" in warning
    config.lean_toolchain = "leanprover/lean4:v4.15.0"
    config.kernel_check = False   # no kernel stage: the off-warning says it all
    assert pin_warning(config) is None
    config.kernel_check = True
    config.lean_toolchain = "leanprover/lean4:v4.3.0"   # unpinned: doctor and the stage refuse it instead
    assert pin_warning(config) is None


# -- the public attacks, at every pinned toolchain's checker -------------------------------------

def attack_stage(verify_config, pin):
    return KernelStage(verify_config(lean_toolchain=f"leanprover/lean4:{pin.toolchain}", lean_command=FAKE_LEAN,
                                     kernel_checker_command=checker_command(pin), workers=2))


def check_modules(stage, theorem: str, target: bytes, submission: bytes) -> KernelResult:
    """The checker alone on two modules (what `lean -o` wrote for the attack's two files)."""
    from prover_cli.verify.kernel.job import Elaborated
    from prover_cli.verify.kernel.pins import CHECKER_AXIOMS

    [result] = stage._check_batch([(KernelJob("", "(the attack's target)", theorem, ""),
                                    Elaborated(target, submission, 0.0))], CHECKER_AXIOMS)
    return result


# The Level `unsafeCast` case (SafeVerify PR #19): Main.lean rebuilds no Level (no evidenced way at
# 4.9 - 4.21, docs/verify.md), so it is the one model attack the stand-in passes (the gap, below).
REFUSED_ATTACKS = sorted(set(fake_checker.ATTACKS) - {"prover_attack_level_cast"})


@pytest.mark.parametrize("toolchain", sorted(PINS))
@pytest.mark.parametrize("attack", REFUSED_ATTACKS)
def test_each_public_attack_is_refused_by_the_checker_we_use_at_every_pinned_toolchain(verify_config, toolchain,
                                                                                      attack):
    pin = PINS[toolchain]
    result = check_modules(attack_stage(verify_config, pin), attack, *fake_checker.ATTACKS[attack])
    assert result.status == "rejected", result.reason
    assert result.reason.startswith(f"kernel check ({pin.checker} {pin.commit[:8]})"), result.reason


def test_the_level_cast_gets_through_main_lean_which_rebuilds_nothing_and_no_canary_can_tell(verify_config):
    """The open gap docs/verify.md names: a Level forged with `unsafeCast` (no public source, so no
    canary) is not caught by prover_check, which rebuilds no Expr or Level; every canary passes."""
    from prover_cli.verify.kernel.kernel_canary import run_kernel_canary

    config = verify_config(lean_command=FAKE_LEAN, kernel_checker_command=FAKE_CHECKER, workers=2)
    stage = KernelStage(config)
    assert check_modules(stage, "prover_attack_level_cast", *fake_checker.ATTACKS["prover_attack_level_cast"]).status \
        == "passed"
    assert all(r["ok"] for r in run_kernel_canary(stage, HEADER))


# SafeVerify's 2024 `checkAxioms` uses core `CollectAxioms`, which reads an opaque's value: the one
# attack of the list it refuses (in the stand-in, as its kernel model walks values).
SAFEVERIFY_2024_REFUSES = {"prover_attack_opaque_value"}


@pytest.mark.parametrize("toolchain", [t for t, p in SAFEVERIFY_PINS.items() if p.dialect == "2024"])
def test_safeverify_at_the_2024_commits_passes_the_public_attacks(verify_config, toolchain):
    """Why Lean 4.9 - 4.21 use our checker: SafeVerify at those commits (no import check, no
    rebuild, no Nat-literal check, inductives not compared; stand-in model of its Main.lean)."""
    pin = SAFEVERIFY_PINS[toolchain]
    stage = attack_stage(verify_config, PINS[toolchain])
    stage.pin, stage.batch_size = pin, 1
    stage.checker_command = [sys.executable, str(TESTS / "fake_safe_verify.py"), "--pin", pin.commit]
    for attack, (target, submission) in fake_checker.ATTACKS.items():
        result = check_modules(stage, attack, target, submission)
        assert result.status == ("rejected" if attack in SAFEVERIFY_2024_REFUSES else "passed"), (attack, result.reason)


@pytest.mark.parametrize("pin", sorted(REFUSED_PINS))
def test_the_2026_safeverify_stand_in_passes_the_non_canonical_literal_hence_refused(verify_config, pin):
    """What the 2026 pins do not check (#39), in their stand-in: the positive non-canonical literal
    passes even with --disallow-partial; the negative hand-built one is refused (it prints `-`)."""
    sv = SAFEVERIFY_PINS[pin]
    stage = attack_stage(verify_config, PINS["v4.15.0"])
    stage.pin, stage.batch_size = sv, 1
    stage.checker_command = [sys.executable, str(TESTS / "fake_safe_verify.py"), "--pin", sv.commit]
    outcome = {attack: check_modules(stage, attack, *fake_checker.ATTACKS[attack]).status
               for attack in ("prover_attack_noncanonical", "prover_attack_olean_hand_built", "prover_attack_opaque_value")}
    assert outcome["prover_attack_noncanonical"] == "passed", outcome
    assert outcome["prover_attack_olean_hand_built"] == "rejected", outcome


@pytest.mark.parametrize("missing", [("imports",), ("unsafe", "natlit"), ("compare",), ("opaque",), ("canonical",),
                                     ("natlit",)])
def test_a_checker_that_accepts_one_public_attack_refuses_to_verify_anything(verify_config, missing, tmp_path,
                                                                             monkeypatch):
    from prover_cli.verify.kernel.kernel_canary import ensure_kernel_canary

    monkeypatch.setenv("PROVER_CANARY_CACHE", str(tmp_path))
    weak = FAKE_CHECKER + [arg for check in missing for arg in ("--without", check)]
    config = verify_config(lean_command=FAKE_LEAN, kernel_checker_command=weak, workers=2)
    with pytest.raises(BackendError, match="verification refuses to run: .*kernel canary 'attack: "):
        ensure_kernel_canary(KernelStage(config), config)
    assert not list(tmp_path.iterdir())   # a failure is never cached


# #39: each new canary is the one thing a build missing its defence gets wrong (every other
# canary, and the honest ones, still as expected).
ALONE = {"opaque": "attack: opaque_value", "canonical": "attack: non-canonical literal",
         "natlit": "attack: olean_issue hand-built"}


@pytest.mark.parametrize("missing", sorted(ALONE))
def test_each_new_canary_alone_catches_a_build_missing_its_defence(verify_config, missing):
    from prover_cli.verify.kernel.kernel_canary import run_kernel_canary

    config = verify_config(lean_command=FAKE_LEAN, kernel_checker_command=FAKE_CHECKER + ["--without", missing],
                           workers=2)
    results = run_kernel_canary(KernelStage(config), HEADER)
    assert [r["canary"] for r in results if not r["ok"]] == [ALONE[missing]], \
        [(r["canary"], r["got"], r["reason"]) for r in results if not r["ok"]]
    full = run_kernel_canary(KernelStage(verify_config(lean_command=FAKE_LEAN, kernel_checker_command=FAKE_CHECKER,
                                                       workers=2)), HEADER)
    assert all(r["ok"] for r in full)


def test_an_attack_that_does_not_compile_fails_its_canary(verify_config):
    """A rejection by `lean -o` would test nothing about the checker."""
    from prover_cli.verify.kernel.kernel_canary import KERNEL_ATTACKS, check_attack

    stage = KernelStage(verify_config(lean_command=[sys.executable, str(TESTS / "fake_lean.py")], workers=2))
    olean_issue = next(a for a in KERNEL_ATTACKS if a.name == "olean_issue")
    result = check_attack(stage, olean_issue)   # the plain stand-in cannot elaborate it
    assert result.status == "error" and "the attack must compile" in result.reason


def test_passes_queue_while_a_batch_runs_and_go_together_never_waiting_for_a_full_batch(verify_config):
    import threading

    from prover_cli.verify.kernel.batching import second_stage
    from prover_cli.verify.text.statement import Candidate

    release, sizes = threading.Event(), []

    class SlowStage:   # the checker's first batch runs until released
        config, batch_size = verify_config(), 3

        def check(self, jobs, allowed):
            sizes.append(len(jobs))
            if len(sizes) == 1:
                release.wait(PATIENCE_S)
            return [KernelResult("passed", "ok", ["propext"]) for _ in jobs]

        def stop(self):
            pass

    reported = []
    fast = Verdict("verified", "all checks passed")
    candidate = Candidate(id="c", header=HEADER, body=HONEST, target="t", statement="theorem t : 2 + 2 = 4 := by")
    with second_stage(SlowStage(), STANDARD) as second:
        for k in range(6):
            second.submit(candidate, fast, (k, {}), lambda *a: reported.append(a))
        release.set()
        second.finish(lambda *a: reported.append(a))
    assert sizes == [1, 3, 2]   # the first at once; then at most batch_size, as they queued
    assert sorted(key for key, _, _ in reported) == list(range(6))


# -- one environment in both stages (issue #32) -------------------------------------------------
# A payload that branches on the environment (`(← getEnv).contains `_prover_trusted` in a tactic)
# sees what is declared before it. The stand-in of that payload is `declared_before`: the names,
# in order, that the source model (tests/fake_kernel_model.py, "what Lean declares") finds in the
# text that precedes the payload, which is all a Lean tactic can see.

PAYLOAD = "theorem t : 2 + 2 = 4 := by\n  decide -- probe"


def declared(text: str) -> list[str]:
    import fake_kernel_model

    return [c["name"] for c in fake_kernel_model.parse_module(text)[1]]


def declared_before(text: str, payload: str = PAYLOAD) -> tuple[list[str], list[str]]:
    """(names declared before the payload, names declared after it) in one file's text."""
    at = text.index(payload)
    return declared(text[:at]), [n for n in declared(text) if n not in declared(text[:at + len(payload)])]


class RecordingRunner:
    """The stage's local runner, keeping every source `lean -o` was given."""

    def __init__(self, config):
        from prover_cli.verify.kernel.isolated import local_runner

        self.runner = local_runner(config)
        self.sources: list[str] = []

    def run(self, argv, inputs, outputs, timeout_s, what=""):
        if "Proof.lean" in inputs:
            self.sources.append(inputs["Proof.lean"].decode("utf-8"))
        return self.runner.run(argv, inputs, outputs, timeout_s, what=what)


@pytest.mark.parametrize("header", [HEADER, HEADER + "\nnamespace Game\n\ndef solution : ℕ := 3\n"],
                         ids=["root", "namespace-left-open"])
def test_the_body_sees_the_same_declarations_in_both_stages(verify_config, tmp_path, header):
    """The REPL session (its env chain, as the REPL stand-in logged what it received) and the
    kernel stage's `lean -o` module declare the same names in the same order before the body and
    after it; the trusted target has the same ones around its statement."""
    import json

    from prover_cli.verify.engine import fast_path_once
    from prover_cli.verify.text.statement import Candidate

    log = tmp_path / "repl.jsonl"
    config = verify_config(workers=1, repl_args=["--log", str(log)], lean_command=FAKE_LEAN,
                           kernel_checker_command=list(FAKE_CHECKER), kernel_check_timeout_s=PATIENCE_S)
    statement = "theorem t : 2 + 2 = 4 := by"
    candidate = Candidate(id="c", header=header, body=PAYLOAD, target="t", statement=statement)
    assert fast_path_once(config, candidate).status == "verified"
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    chain = [e["cmd"] for e in sent if e.get("kind") in ("header", "trusted", "cmd", "alias")]
    assert [e["kind"] for e in sent if e.get("kind") in ("header", "trusted", "cmd", "alias")] == \
        ["header", "trusted", "cmd", "alias"]
    repl_before, repl_after = declared_before("\n\n".join(chain))

    runner = RecordingRunner(config)
    [result] = KernelStage(config, runner=runner).check([job(PAYLOAD, statement, header)], STANDARD)
    assert result.status == "passed", result.reason
    [target_source] = [s for s in runner.sources if PAYLOAD not in s]
    [module] = [s for s in runner.sources if PAYLOAD in s]
    kernel_before, kernel_after = declared_before(module)
    assert (kernel_before, kernel_after) == (repl_before, repl_after)
    namespace = "Game." if "namespace Game" in header else ""
    assert [n for n in kernel_before if "_prover" in n] == [f"{namespace}_prover_hole", f"{namespace}_prover_trusted"]
    assert kernel_after and all("_prover_same" in n for n in kernel_after)
    assert declared(target_source) == kernel_before + [f"{namespace}t"] + kernel_after


def test_main_lean_and_its_stand_in_name_the_fast_paths_declarations():
    """checker/Main.lean `isTrustedAux` and tests/fake_checker.py name what rules.py declares."""
    import re

    from prover_cli.verify.kernel.pins import OWN_CHECKER_DIR
    from prover_cli.verify.text.rules import HOLE, TRUSTED

    main = (OWN_CHECKER_DIR / "Main.lean").read_text(encoding="utf-8")
    body = main[main.index("def isTrustedAux"):main.index("def isTrustedAux") + 200]
    assert set(re.findall(r'lastIs n "(\w+)"', body)) == {HOLE, TRUSTED} == set(fake_checker.TRUSTED_AUX)


def _aux_modules(trusted_value: str = "_prover_hole", trusted_type: str = ": 2 + 2 = 4"):
    """(target, submission) in the model: the fast path's declarations, then the target theorem."""
    def aux(value, type_text):
        return [fake_checker.const("_prover_hole", "axiom", "{p : Prop} : p"),
                fake_checker.const("_prover_trusted", "theorem", type_text, value)]
    theorem = fake_checker.const("t", "theorem", ": 2 + 2 = 4", "decide")
    return (fake_checker.module(["Init", "Mathlib"], [*aux("_prover_hole", ": 2 + 2 = 4"), {**theorem, "value": "sorry"}]),
            fake_checker.module(["Init", "Mathlib"], [*aux(trusted_value, trusted_type), theorem]))


def _run_checker(tmp_path, target: bytes, submission: bytes) -> list[str]:
    import subprocess

    (tmp_path / "T0.olean").write_bytes(target)
    (tmp_path / "P0.olean").write_bytes(submission)
    done = subprocess.run(["env", *CHECKER_ENV, *FAKE_CHECKER, str(tmp_path)],
                          capture_output=True, text=True, check=True)
    return done.stdout.split("\n")


@pytest.mark.parametrize("value, type_text, passes", [
    ("_prover_hole", ": 2 + 2 = 4", True),      # as the fast path declares it: held to the target's, no axiom check
    ("by decide", ": 2 + 2 = 4", False),        # another value than the trusted target's
    ("_prover_hole", ": 2 + 2 = 5", False),     # another type
])
def test_the_checker_takes_the_fast_paths_declarations_from_the_target_never_from_the_submission(
        tmp_path, value, type_text, passes):
    answer = _run_checker(tmp_path, *_aux_modules(value, type_text))
    assert ("pair 0 passed" in answer) == passes, answer
    if passes:   # `_prover_trusted` is not reported as a target theorem
        assert [line.split()[2] for line in answer if line.startswith("axioms ")] == ["t"]
    else:
        assert answer[0].startswith("pair 0 rejected theorem _prover_trusted of the trusted target has another"), answer


def test_a_target_that_uses_the_fast_paths_trusted_theorem_is_rejected(stage):
    """`_prover_trusted` is proved by the hole axiom: a proof through it depends on `_prover_hole`."""
    for pin in (PIN_OWN,):
        [result] = stage(pin).check([job("theorem t : 2 + 2 = 4 := by\n  exact _prover_trusted")], STANDARD)
        assert result.status == "rejected" and "_prover_hole" in result.reason, (pin.dialect, result.reason)


SAFEVERIFY_FAILED = "uncaught exception: SafeVerify check failed. For more diagnostic information about failures, " \
                    "run safe_verify with the -v (or --verbose) flag.\n"


def _safeverify_run(violations: list[str], failures: dict[str, object]) -> RunResult:
    """A 2026 run that ended in `SafeVerify check failed.`, in the shape of Main.lean at b291b588
    (`runSafeVerify`, then the `--save` report, then the throw)."""
    import json

    report = [[name, {"targetInfo": {"constInfo": {"kind": "theorem"}, "axioms": []},
                      "solutionInfo": {"constInfo": {"kind": "theorem"}, "axioms": ["propext"]},
                      "failureMode": failures.get(name)}] for name in ("_prover_trusted", "t", "_prover_same")]
    stderr = "Replaying /d/Proof.olean\n------------------\n" + "".join(v + "\n" for v in violations) + SAFEVERIFY_FAILED
    return RunResult(exit_code=1, stderr=stderr, files={"report.json": json.dumps(report).encode()})


@pytest.mark.parametrize("violations, failures, status", [
    (["_prover_trusted used disallowed axioms. #[_prover_hole]"], {"_prover_trusted": "axioms"}, "passed"),
    (["Game._prover_trusted used disallowed axioms. #[propext, Game._prover_hole]"],
     {"_prover_trusted": "axioms"}, "rejected"),        # the violation is not the report's `_prover_trusted`
    (["_prover_trusted used disallowed axioms. #[_prover_hole]", "h used disallowed axioms. #[sorryAx]"],
     {"_prover_trusted": "axioms"}, "rejected"),        # another declaration of the submission failed too
    (["_prover_trusted used disallowed axioms. #[_prover_hole, sorryAx]"], {"_prover_trusted": "axioms"}, "rejected"),
    (["_prover_trusted used disallowed axioms. #[_prover_hole]"], {"_prover_trusted": "thmType"}, "rejected"),
    (["_prover_trusted used disallowed axioms. #[_prover_hole]"], {"_prover_trusted": "axioms", "t": "axioms"},
     "rejected"),
])
def test_safeverify_failing_on_the_fast_paths_trusted_theorem_alone_is_read_as_its_pass(violations, failures, status):
    result = read_checker(PIN_2026, _safeverify_run(violations, failures), "t", frozenset(STANDARD))
    assert result.status == status, result.reason


def test_doctor_names_why_a_refused_toolchain_has_no_checker():
    """Lean 4.27/4.29 have only SafeVerify's 2026 commits, refused (kernel/pins.py REFUSED_PINS): the
    doctor gives that reason, not "nothing pinned"; a toolchain nobody pinned says so."""
    from prover_cli.config import VerifyConfig
    from prover_cli.doctor import check_kernel_checker
    from prover_cli.verify.kernel.pins import REFUSED_PINS

    assert {"v4.27.0", "v4.29.0"} <= set(REFUSED_PINS)
    refused = check_kernel_checker(VerifyConfig(lean_toolchain="leanprover/lean4:v4.27.0"))
    assert not refused.ok and refused.detail.startswith("Lean v4.27.0 is refused: SafeVerify at")
    unknown = check_kernel_checker(VerifyConfig(lean_toolchain="leanprover/lean4:v4.3.0"))
    assert not unknown.ok and unknown.detail == "no kernel checker is pinned for Lean v4.3.0"
