"""The box (prover_cli/verify/lean/box.py): its argv, its policy, and what the real bwrap makes of it.

Every test but the last section runs on any machine: `bwrap` on PATH is the stand-in
(tests/fake_bwrap.py, put there by conftest.py), which checks the argv as bwrap 0.8.0 does and
isolates nothing. The last section runs the real bwrap (skipped, saying why, where there is none
or it cannot make namespaces here) and shows what the box prevents.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import FAKE_BWRAP, PATIENCE_S, fake_repl_command
from prover_cli.errors import BackendError
from prover_cli.verify.lean import box

from test_verify_statement import STATEMENT  # noqa: E402  (the stand-ins know it)

# --------------------------------------------------------------------------------------------
# The argv, from explicit paths
# --------------------------------------------------------------------------------------------


def test_argv_unshares_everything_drops_capabilities_and_clears_the_environment():
    argv = box.bwrap_argv(["lake", "env", "repl"], bwrap="/usr/bin/bwrap", read_only=["/usr", "/proj"],
                          writable=["/tmp/step"], cwd="/proj", env={"PATH": "/usr/bin", "HOME": "/h"})
    assert argv[0] == "/usr/bin/bwrap"
    head = argv[:argv.index("--")]
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in head
    assert head[head.index("--cap-drop") + 1] == "ALL"
    assert "--share-net" not in head and "--dev-bind" not in head
    assert argv[argv.index("--") + 1:] == ["lake", "env", "repl"]
    # the environment is exactly the one given, set after --clearenv
    sets = [tuple(head[k + 1:k + 3]) for k, a in enumerate(head) if a == "--setenv"]
    assert sets == [("HOME", "/h"), ("PATH", "/usr/bin")]
    assert head.index("--clearenv") < head.index("--setenv")


def test_argv_orders_mounts_so_the_step_directory_stays_writable():
    argv = box.bwrap_argv(["lean"], bwrap="bwrap", read_only=["/usr", "/tmp/project"], writable=["/tmp/step"],
                          cwd="/tmp/project", env={})
    ops = [(a, argv[k + 1]) for k, a in enumerate(argv) if a in ("--tmpfs", "--ro-bind", "--bind", "--dev", "--proc")]
    assert ops == [("--dev", "/dev"), ("--proc", "/proc"), ("--tmpfs", "/tmp"), ("--ro-bind", "/usr"),
                   ("--ro-bind", "/tmp/project"), ("--bind", "/tmp/step")]
    # a tmpfs after the binds under /tmp would hide them; a read-only bind after the step dir would
    # make it read-only: neither happens
    assert argv[argv.index("--chdir") + 1] == "/tmp/project"


def test_read_only_paths_are_the_system_the_toolchain_the_project_and_the_commands_files(tmp_path, monkeypatch):
    elan = tmp_path / "elan"
    (elan / "bin").mkdir(parents=True)
    project = tmp_path / "project"
    (project / ".lake" / "packages").mkdir(parents=True)
    tool = tmp_path / "tool" / "bin" / "mytool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    script = tmp_path / "scripts" / "run.py"
    script.parent.mkdir()
    script.write_text("")
    monkeypatch.setenv("ELAN_HOME", str(elan))
    monkeypatch.setenv("PATH", f"{tool.parent}:{os.environ['PATH']}")
    paths = box.read_only_paths(["mytool", str(script), "--flag"], str(project))
    assert str(elan) in paths and str(project) in paths
    assert str(tool.parent.parent) in paths          # the install root: bin/ and its lib/ beside it
    assert str(script.parent) in paths               # a file argument: its directory
    assert str(project / ".lake") not in paths       # inside the project: bound once, with it
    assert str(tmp_path) not in paths and os.path.expanduser("~") not in paths
    assert "/etc" not in paths and "/" not in paths


def test_box_none_is_the_command_unchanged():
    assert box.boxed(["lake", "env", "repl"], "none", None) == ["lake", "env", "repl"]


def test_an_unknown_box_is_refused():
    with pytest.raises(BackendError, match="verify.box = 'docker'"):
        box.boxed(["lake"], "docker", None)


def test_without_bwrap_verification_refuses_naming_the_key_and_the_two_ways_out(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))   # no bwrap (neither stand-in nor real)
    with pytest.raises(BackendError) as info:
        box.boxed([sys.executable, "-c", "pass"], "bubblewrap", None)
    message, hint = str(info.value), info.value.hint
    assert 'verify.box = "bubblewrap"' in message and "`bwrap` not found" in message
    assert "apt-get install bubblewrap" in hint and 'verify.box = "none"' in hint


def test_a_bwrap_that_cannot_make_the_box_is_refused_with_its_reason(monkeypatch, tmp_path):
    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with pytest.raises(BackendError) as info:
        box.boxed([sys.executable, "-c", "pass"], "bubblewrap", None)
    assert "cannot make the box here: bwrap: No permissions to creating new namespace" in str(info.value)


def test_a_missing_program_is_named_before_any_box(tmp_path):
    with pytest.raises(BackendError, match=r"verify.lean_command = .*cannot start `/nonexistent/lean`"):
        box.boxed(["/nonexistent/lean", "-o"], "bubblewrap", str(tmp_path), what="verify.lean_command")


# --------------------------------------------------------------------------------------------
# The stand-in against bwrap's recorded answers
# --------------------------------------------------------------------------------------------

# Recorded with the real bwrap: /usr/bin/bwrap of Debian's bubblewrap 0.8.0-2+deb12u1, 2026-12-01,
# each run as `bwrap ARGS` (exit code 1 for all); the messages are bubblewrap.c's `die()` calls at
# v0.8.0 (commit 4ab175fe6d3a4053444b04d805a6d686f53455b9).
RECORDED = [
    (["--bogus"], "bwrap: Unknown option --bogus"),
    (["--ro-bind", "/nonexist", "/nonexist", "true"], "bwrap: Can't find source path /nonexist: No such file or directory"),
    (["--chdir"], "bwrap: --chdir takes one argument"),
    (["--setenv", "A"], "bwrap: --setenv takes two arguments"),
    (["--tmpfs"], "bwrap: --tmpfs takes an argument"),
    (["--tmpfs", "/tmp", "--chdir", "/tmp", "true"], "bwrap: execvp true: No such file or directory"),
    (["--ro-bind", "/usr", "/usr", "--chdir", "/usr", "nosuch"], "bwrap: execvp nosuch: No such file or directory"),
    (["--unshare-all", "--ro-bind", "/usr", "/usr", "--tmpfs", "/tmp", "--chdir", "/tmp", "/usr/bin/true"],
     "bwrap: execvp /usr/bin/true: No such file or directory"),   # no /lib64: the ELF loader is missing
    (["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--chdir", "/nonexistent", "true"],
     "bwrap: Can't chdir to /nonexistent: No such file or directory"),
    (["--cap-drop", "BOGUS", "true"], "bwrap: unknown cap: BOGUS"),
]


def _stand_in(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-S", str(FAKE_BWRAP), *args], capture_output=True, text=True,
                          timeout=PATIENCE_S, cwd="/", **kwargs)


@pytest.mark.parametrize("args, stderr", RECORDED, ids=[" ".join(a)[:40] for a, _ in RECORDED])
def test_stand_in_answers_as_bwrap_did(args, stderr):
    if not Path("/usr/bin/true").exists():
        pytest.skip("these recordings name /usr/bin/true")
    done = _stand_in(args)
    assert (done.returncode, done.stderr.strip()) == (1, stderr)


def test_stand_in_with_no_command_prints_the_usage():
    done = _stand_in(["--unshare-all"])
    assert done.returncode == 1 and done.stderr.startswith("usage: ")


def test_stand_in_refuses_what_it_does_not_model():
    done = _stand_in(["--seccomp", "3", "true"])
    assert done.returncode == 1 and "not modelled: --seccomp" in done.stderr


def test_stand_in_runs_the_box_argv_with_exactly_the_box_environment(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("LEAN_PATH", "/somewhere/writable")
    argv = box.boxed([sys.executable, "-c", "import os, sys; print(sorted(os.environ)); print(os.getcwd())"],
                     "bubblewrap", os.getcwd())
    assert Path(argv[0]).name == "bwrap"   # the stand-in, from conftest
    done = subprocess.run(argv, capture_output=True, text=True, timeout=PATIENCE_S)
    assert done.returncode == 0, done.stderr
    names = eval(done.stdout.splitlines()[0])   # noqa: S307 - our own print of a list of str
    assert "HF_TOKEN" not in names and "LEAN_PATH" not in names and "PATH" in names
    assert set(names) <= set(box.ENV_KEPT) | {"PWD"}
    assert done.stdout.splitlines()[1] == os.getcwd()


def test_the_pool_spawns_each_repl_in_the_box(verify_config):
    from prover_cli.verify.engine import verify_records
    from prover_cli.verify.lean.transport import local_transport_factory

    config = verify_config(workers=1, kernel_check=False)   # the kernel steps: the LocalRunner tests below
    transport = local_transport_factory(config)()
    transport.start()   # boxed at start: a box that cannot be made fails there, as a missing program does
    try:
        assert Path(transport.command[0]).name == "bwrap" and "--unshare-all" in transport.command
        assert transport.command[transport.command.index("--") + 1:] == list(config.repl_command)
    finally:
        transport.kill()
    record = {"id": "p", "formal_statement": STATEMENT, "proof": "  linarith"}
    [verdict] = verify_records([record], config)   # the REPL through the stand-in box
    assert verdict["verdict"] == "verified", verdict


def test_the_kernel_stage_runs_each_step_in_the_box(tmp_path, monkeypatch):
    from prover_cli.verify.kernel.isolated import LocalRunner

    monkeypatch.setenv("PROVER_TEST_SECRET", "s3cret")
    result = LocalRunner(str(tmp_path)).run(
        [sys.executable, "-c", "import os; print('PROVER_TEST_SECRET' in os.environ); open('{dir}/out', 'w').write('x')"],
        inputs={"in": b""}, outputs=("out",), timeout_s=PATIENCE_S)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "False"   # the box's environment, not ours
    assert result.files == {"out": b"x"}


def test_box_none_runs_unboxed_and_the_doctor_says_so(verify_config, monkeypatch, tmp_path):
    from prover_cli.doctor import check_box
    from prover_cli.verify.lean.transport import local_transport_factory

    monkeypatch.setenv("PATH", str(tmp_path))   # no bwrap at all: "none" does not need one
    config = verify_config(workers=1, box="none")
    transport = local_transport_factory(config)()
    transport.start()
    try:
        assert transport.command == list(config.repl_command)
    finally:
        transport.kill()
    check = check_box(config)
    assert not check.ok and "not in force" in check.detail and 'verify.box = "none"' in check.detail


def test_doctor_says_the_box_is_in_force_when_bwrap_runs(verify_config):
    from prover_cli.doctor import check_box

    check = check_box(verify_config())   # with the stand-in: it ran `true`, and isolated nothing
    assert check.ok and check.detail.startswith("in force: ")


def test_doctor_asks_the_repl_in_the_box(tmp_path):
    from prover_cli.doctor import check_lean

    check = check_lean(fake_repl_command(), str(tmp_path), box="bubblewrap")
    assert check.ok and check.detail.endswith("(in the box)")
    refused = check_lean(fake_repl_command(), str(tmp_path / "missing"), box="bubblewrap")
    assert not refused.ok   # bwrap cannot chdir into a project that does not exist


def test_doctor_names_the_fix_when_there_is_no_bwrap(verify_config, monkeypatch, tmp_path):
    from prover_cli.doctor import check_box

    monkeypatch.setenv("PATH", str(tmp_path))
    check = check_box(verify_config())
    assert not check.ok and "refuses to run" in check.detail and "apt-get install bubblewrap" in check.fix


def test_config_rejects_an_unknown_box(tmp_path):
    from prover_cli.config import load_config
    from prover_cli.errors import ConfigError

    path = tmp_path / "c.toml"
    path.write_text('[verify]\nbox = "docker"\n')
    with pytest.raises(ConfigError, match="verify.box"):
        load_config(path)


# --------------------------------------------------------------------------------------------
# The real box: what untrusted code inside it cannot do
# --------------------------------------------------------------------------------------------

def _real_bwrap() -> str | None:
    return shutil.which("bwrap", path=os.environ.get("PROVER_TEST_REAL_PATH", os.environ.get("PATH")))


@pytest.fixture
def real_bwrap(monkeypatch):
    found = _real_bwrap()
    if found is None:
        pytest.skip("no real bwrap on this machine (install bubblewrap to run the box's real tests)")
    ok, detail = box.probe(found)
    if not ok:
        pytest.skip(f"the real bwrap cannot make the box here: {detail}")
    monkeypatch.setenv("PATH", os.environ.get("PROVER_TEST_REAL_PATH", os.environ["PATH"]))
    return found


# A proof stand-in: what code that escaped the verdict rules would try. It reports each attempt as
# a line `name: ok` or `name: refused (why)`; run as a kernel step (argv) or as a REPL (one request).
PAYLOAD = textwrap.dedent('''
    import json, os, socket, sys

    def attempt(name, action):
        try:
            action()
            return f"{name}: ok"
        except OSError as exc:
            return f"{name}: refused ({exc.strerror or exc})"

    def write(path, data="pwned"):
        with open(path, "w") as f:
            f.write(data)

    def connect():
        s = socket.create_connection(("127.0.0.1", @PORT@), timeout=5)
        s.close()

    LIB = @LIBRARY@
    lines = [
        attempt("overwrite library olean", lambda: write(os.path.join(LIB, "Mathlib.olean"))),
        attempt("add module to library", lambda: write(os.path.join(LIB, "Evil.olean"))),
        attempt("write project", lambda: write(os.path.join(@PROJECT@, "lakefile.lean"))),
        attempt("write home", lambda: write(os.path.join(@HOME@, "planted"))),
        attempt("connect to the host", connect),
        attempt("write own tmp", lambda: write("/tmp/scratch")),
        "secret visible: " + str("PROVER_TEST_SECRET" in os.environ),
    ]
    if len(sys.argv) > 1:   # a kernel step: its own directory is writable
        lines.append(attempt("write own dir", lambda: write(os.path.join(sys.argv[1], "out"))))
        print("\\n".join(lines))
    else:                   # a REPL: answer the first request with the report
        while sys.stdin.readline().strip():
            pass
        print(json.dumps({"env": 0, "messages": [{"severity": "info", "data": "\\n".join(lines)}]}) + "\\n", flush=True)
''')


@pytest.fixture
def attack(tmp_path, monkeypatch):
    """A Lean project with a built library, a host service on 127.0.0.1, a secret, and the payload."""
    project = tmp_path / "project"
    library = project / ".lake" / "packages" / "mathlib" / ".lake" / "build" / "lib"
    library.mkdir(parents=True)
    (library / "Mathlib.olean").write_bytes(b"trusted")
    (project / "lakefile.lean").write_text("-- trusted\n")
    home = tmp_path / "home"
    home.mkdir()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    script = tmp_path / "payload" / "payload.py"
    script.parent.mkdir()
    script.write_text(PAYLOAD.replace("@LIBRARY@", repr(str(library))).replace("@PROJECT@", repr(str(project)))
                      .replace("@HOME@", repr(str(home))).replace("@PORT@", str(port)))
    monkeypatch.setenv("PROVER_TEST_SECRET", "s3cret")
    yield {"project": project, "library": library, "home": home, "script": script, "server": server}
    server.close()


def _assert_nothing_escaped(report: str, attack: dict) -> None:
    lines = dict(line.split(": ", 1) for line in report.strip().splitlines())
    for name in ("overwrite library olean", "add module to library", "write project", "write home"):
        assert lines[name].startswith("refused ("), (name, report)
    assert lines["connect to the host"].startswith("refused ("), report
    assert lines["write own tmp"] == "ok" and lines["secret visible"] == "False", report
    assert (attack["library"] / "Mathlib.olean").read_bytes() == b"trusted"
    assert sorted(p.name for p in attack["library"].iterdir()) == ["Mathlib.olean"]
    assert (attack["project"] / "lakefile.lean").read_text() == "-- trusted\n"
    assert list(attack["home"].iterdir()) == []


def test_the_payload_escapes_when_unboxed(attack, tmp_path):
    """The control: the same payload, run without the box, does all of it (so the test below can fail)."""
    from prover_cli.verify.kernel.isolated import LocalRunner

    result = LocalRunner(str(attack["project"]), box="none").run(
        [sys.executable, str(attack["script"]), "{dir}"], inputs={}, outputs=(), timeout_s=PATIENCE_S)
    assert "overwrite library olean: ok" in result.stdout and "connect to the host: ok" in result.stdout
    assert "secret visible: True" in result.stdout


def test_a_kernel_step_in_the_real_box_cannot_write_the_library_or_reach_the_network(real_bwrap, attack):
    from prover_cli.verify.kernel.isolated import LocalRunner

    runner = LocalRunner(str(attack["project"]), box="bubblewrap")
    result = runner.run([sys.executable, str(attack["script"]), "{dir}"], inputs={}, outputs=("out",),
                        timeout_s=PATIENCE_S)
    assert result.exit_code == 0, result.stderr
    report = result.stdout.replace("write own dir: ok\n", "").replace("\nwrite own dir: ok", "")
    assert "write own dir: ok" in result.stdout and result.files == {"out": b"pwned"}
    _assert_nothing_escaped(report, attack)


def test_a_repl_in_the_real_box_cannot_write_the_library_or_reach_the_network(real_bwrap, attack):
    from prover_cli.verify.lean.repl import ReplProcess

    proc = ReplProcess([sys.executable, str(attack["script"])], str(attack["project"]), box="bubblewrap")
    proc.start()
    try:
        assert proc.transport.command[0] == real_bwrap
        answer = proc.request({"cmd": "theorem t : True := trivial"}, time.monotonic() + PATIENCE_S)
    finally:
        proc.kill()
    _assert_nothing_escaped(answer["messages"][0]["data"], attack)


def test_the_fake_repl_answers_in_the_real_box(real_bwrap):
    from prover_cli.verify.lean.repl import ReplProcess

    proc = ReplProcess(fake_repl_command(), box="bubblewrap")
    proc.start()
    try:
        assert proc.request({"cmd": "import Mathlib"}, time.monotonic() + PATIENCE_S) == {"env": 0}
    finally:
        proc.kill()


def test_a_repl_killed_in_the_real_box_leaves_no_process(real_bwrap, tmp_path):
    """The pool's kill (SIGKILL to the wrapper's group) reaches what runs in the box: bwrap's
    `--die-with-parent` kills the box's init, and with it the pid namespace."""
    from prover_cli.verify.lean.repl import ReplProcess, ReplTimeout

    script = tmp_path / f"repl_{os.getpid()}_{time.monotonic_ns()}.py"   # a name no other process has
    shutil.copy(Path(fake_repl_command()[1]), script)
    proc = ReplProcess([sys.executable, str(script)], box="bubblewrap")
    proc.start()
    with pytest.raises(ReplTimeout):
        proc.request({"cmd": "theorem t : True := by fake_hang"}, time.monotonic() + 1.0)
    proc.kill()

    def running() -> list[str]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if script.name.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                pass
        return found

    assert running() == []


# --------------------------------------------------------------------------------------------
# #39: no mount is or holds $HOME or a credential path
# --------------------------------------------------------------------------------------------

@pytest.fixture
def fake_home(tmp_path, monkeypatch):
    """$HOME with a dummy ~/.modal.toml and ~/.cache/huggingface, a project and a program under it."""
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".modal.toml").write_text("token_secret = 'dummy'\n")
    (home / "proj").mkdir()
    (home / "bin").mkdir()
    peek = home / "bin" / "peek"
    peek.write_text('#!/bin/sh\nif token=$(cat "$HOME/.modal.toml" 2>/dev/null); then echo "read: $token"; '
                    'else echo "refused: $HOME/.modal.toml"; fi\n')
    peek.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    return home


def test_a_mount_that_is_or_holds_home_or_credentials_is_refused_naming_it(fake_home):
    home = os.path.realpath(fake_home)
    with pytest.raises(BackendError) as raised:   # run from $HOME: the project bind would be $HOME
        box.boxed([sys.executable, "-c", "pass"], "bubblewrap", str(fake_home), what="verify.repl_command")
    assert f"would bind {home} read-only, which shows your home directory {home}" in str(raised.value)
    assert box.secrets_under(os.path.dirname(home)) == f"your home directory {home}"      # a parent of it
    assert box.secrets_under(os.path.join(home, ".cache")) == os.path.join(home, ".cache", "huggingface")
    assert box.secrets_under(os.path.join(home, ".modal.toml")) == os.path.join(home, ".modal.toml")
    assert box.secrets_under(os.path.join(home, "proj")) is None
    # the project under $HOME is fine: only its own directory is bound
    argv = box.boxed([sys.executable, "-c", "pass"], "bubblewrap", str(fake_home / "proj"))
    binds = [argv[k + 1] for k, a in enumerate(argv) if a in ("--ro-bind", "--bind")]
    assert str(fake_home / "proj") in binds and home not in binds


def test_a_program_under_home_bin_binds_that_directory_never_home(fake_home):
    """`~/bin/lake`'s install root would be $HOME (lib/ beside bin/): the box binds ~/bin alone."""
    argv = box.boxed([str(fake_home / "bin" / "peek")], "bubblewrap", str(fake_home / "proj"))
    binds = [argv[k + 1] for k, a in enumerate(argv) if a in ("--ro-bind", "--bind")]
    assert str(fake_home / "bin") in binds
    assert not any(box.secrets_under(path) for path in binds), binds


def test_the_doctor_says_so_naming_the_mount(fake_home):
    from prover_cli.config import VerifyConfig
    from prover_cli.doctor import check_box

    config = VerifyConfig()
    config.project_dir = str(fake_home)
    check = check_box(config)
    assert not check.ok and f"would bind {os.path.realpath(fake_home)} read-only" in check.detail, check.detail
    config.project_dir = str(fake_home / "proj")
    config.repl_command = [sys.executable, "-c", "pass"]
    config.lean_command = [sys.executable, "-c", "pass"]
    config.kernel_checker_command = [sys.executable, "{checker}"]
    assert box.config_mount_problem(config) is None


def test_in_the_real_box_a_program_under_home_bin_cannot_read_the_modal_token(real_bwrap, fake_home):
    argv = box.boxed([str(fake_home / "bin" / "peek")], "bubblewrap", str(fake_home / "proj"))
    assert argv[0] == real_bwrap
    done = subprocess.run(argv, capture_output=True, text=True, timeout=PATIENCE_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"refused: {fake_home}/.modal.toml", done.stdout
    # unboxed, the same program reads it: the test shows the box is what keeps it out
    assert "read: token_secret" in subprocess.run([str(fake_home / "bin" / "peek")], capture_output=True,
                                                  text=True).stdout


def test_verification_run_from_home_refuses_naming_the_mount(fake_home, verify_config, monkeypatch):
    """`prover verify` from $HOME (project_dir unset, the working directory $HOME): no proof is
    checked; the error names the bind and what it would show."""
    from prover_cli.verify import verify_records

    config = verify_config(box="bubblewrap", project_dir="", canary=False)
    monkeypatch.chdir(fake_home)
    with pytest.raises(BackendError, match=rf"would bind {os.path.realpath(fake_home)} read-only, which shows your "
                                           rf"home directory"):
        verify_records([{"id": "a", "formal_statement": STATEMENT, "proof": "  linarith"}], config)
