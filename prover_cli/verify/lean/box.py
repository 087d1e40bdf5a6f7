"""The box: every local process that elaborates untrusted text runs under bubblewrap (`bwrap`).

A lexer gap is code execution (`run_cmd`, `#eval`, an `initialize`): without the box, that code
runs as you, with your network, your files and your secrets. In the box (`verify.box =
"bubblewrap"`, the default), the REPL processes (`lake env repl`) and the kernel stage's steps
(`lean -o`, the checker) see:

- no network: a new network namespace has only a loopback device (`--unshare-all`, which also
  unshares the pid, ipc, uts, user and cgroup namespaces where the kernel allows);
- read-only: the system's `/usr` (and the `/bin`, `/lib*`, `/sbin` links into it, the dynamic
  loader's files in `/etc`), the toolchain (`$ELAN_HOME`, default `~/.elan`, and the install root
  of the command's program), the Lean project with its `.lake` packages, and the command's own
  files (an argument naming an existing file: its directory). So nothing that ran untrusted text
  can write the library (Mathlib's `.olean` files, the toolchain) the checker reads;
- writable: a fresh, empty `/tmp` (a tmpfs that dies with the box) and, for a kernel-stage step,
  its own temporary directory (`--bind`); nothing else of the host exists in the box;
- no capabilities (`--cap-drop ALL`: bwrap run by root keeps root's capabilities otherwise,
  bubblewrap.c v0.8.0 `drop_privs`/"If our uid is 0, default to inheriting all caps", so a boxed
  root could remount the library writable), a new session (`--new-session`: no terminal to inject
  input into), and death with its parent (`--die-with-parent`);
- an environment of a few variables (`ENV_KEPT`) instead of ours: no tokens (`HF_TOKEN`,
  `MODAL_TOKEN_SECRET`, …) to print into a message, and no inherited `LEAN_PATH`, so the search
  path `lake env` builds is the toolchain's lib and the project's package build dirs only.

What it does not protect against: reading what it can see (the project, the toolchain) and saying
it in its messages; using CPU, memory (the address-space limit stays the transport's) and `/tmp`
(memory) until the deadline kills it; a kernel or bwrap exploit. The Modal backend does not use
this box: its REPLs and kernel steps run in Modal Sandboxes (`block_network=True`, a fresh
filesystem from the Lean image per batch: on_modal/sandbox.py), where `verify.box` does not apply.

Not yet run around a real `lake env repl` (no toolchain here). Lake reads an up-to-date
configuration cache read-only; a stale one makes it write `lakefile.olean.lock`, which the box
refuses, and verification then fails closed (docs/verify.md, *The box*, with the source read).

Flags and their arity are bubblewrap's (containers/bubblewrap, bubblewrap.c `parse_args_recurse`
at v0.8.0, commit 4ab175fe6d3a4053444b04d805a6d686f53455b9, Debian bookworm's package); a mount
op is applied in argv order, so `/tmp`'s tmpfs comes before the binds that may lie under it and
the writable directory comes last (it must not be shadowed by a read-only bind of its parent).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from typing import Sequence

from prover_cli.errors import BackendError

BOX_CHOICES = ("bubblewrap", "none")

# Top-level system paths the programs need (a merged-/usr system has /bin etc. as links into /usr;
# each is recreated as the same link, or bound read-only when it is a directory).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The dynamic loader's configuration; not all of /etc (it holds host secrets and the box is root
# when we are).
ETC_PATHS = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
# Variables the boxed process gets (when we have them); everything else is left out (--clearenv).
ENV_KEPT = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "ELAN_HOME", "ELAN_TOOLCHAIN")

# What a mount must never be or contain (relative to $HOME; $HOME itself too): the files a process
# that ran untrusted text could read and print into a message. A read-only bind shows everything
# under it, so a project or program under $HOME is bound by its own directory, never $HOME's.
CREDENTIAL_PATHS = (".modal.toml", ".cache/huggingface", ".huggingface", ".netrc", ".ssh", ".aws", ".azure",
                    ".config/gcloud", ".config/gh", ".config/modal", ".docker", ".git-credentials", ".gnupg",
                    ".kaggle", ".pypirc", ".wandb", ".netrc", ".cache/wandb")

INSTALL_HINT = ("install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`, `pacman -S "
                "bubblewrap`), or set verify.box = \"none\" to run Lean on untrusted text unboxed (a proof that "
                "escapes the verdict rules then runs code as you, with your network and files)")


# --------------------------------------------------------------------------------------------
# The argv
# --------------------------------------------------------------------------------------------

def bwrap_argv(command: list[str], *, bwrap: str, read_only: list[str], writable: Sequence[str] = (),
               cwd: str, env: dict[str, str]) -> list[str]:
    """`bwrap … -- command`: `read_only` paths bound read-only at the same place (a symbolic
    link recreated as itself), `writable` directories bound writable, `cwd` the working
    directory inside, `env` the whole environment inside. Pure: the paths are given."""
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv"]
    for name, value in sorted(env.items()):
        argv += ["--setenv", name, value]
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in read_only:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        else:
            argv += ["--ro-bind", path, path]
    for path in writable:
        argv += ["--bind", path, path]
    return argv + ["--chdir", cwd, "--", *command]


def secrets_under(path: str, home: str | None = None) -> str | None:
    """What a bind of `path` would show that it must not: $HOME (the path is it or holds it) or a
    credential path (CREDENTIAL_PATHS) it is or holds; None when it shows neither."""
    home = os.path.realpath(home or os.path.expanduser("~"))
    path = os.path.realpath(path)
    inside = (lambda secret: secret == path or secret.startswith(path.rstrip("/") + "/"))
    if home != "/" and inside(home):
        return f"your home directory {home}"
    for rel in CREDENTIAL_PATHS:
        secret = os.path.join(home, rel)
        if inside(secret) and os.path.lexists(secret):
            return f"{secret}"
    return None


def mount_problem(read_only: list[str], writable: Sequence[str] = (), what: str = "verify.repl_command") -> str | None:
    """Why the box must not be made with these binds (a message naming the mount), or None."""
    for path in [*read_only, *writable]:
        secret = secrets_under(path)
        if secret is not None:
            return (f"the box for {what} would bind {path} {'writable' if path in writable else 'read-only'}, "
                    f"which shows {secret} to the untrusted text: run from the Lean project (verify.project_dir) "
                    f"rather than from your home directory, and keep the programs it runs out of a directory "
                    f"that holds your home or credentials")
    return None


def program_argv(command: list[str]) -> list[str]:
    """`command` without a leading `env NAME=VALUE ...` (kernel/ runs its checker so): the
    program that runs and its arguments, for the box's binds and the not-found check."""
    if command[:1] != ["env"]:
        return list(command)
    rest = list(command[1:])
    while rest and "=" in rest[0] and not rest[0].startswith(("-", "/", ".")):
        rest.pop(0)
    return rest


def read_only_paths(command: list[str], cwd: str) -> list[str]:
    """What the box shows read-only for `command` run in `cwd` (the Lean project): the system, the
    toolchain, the project, the program's install root and the directories of file arguments."""
    command = program_argv(command)
    wanted = [p for p in SYSTEM_PATHS + ETC_PATHS if os.path.lexists(p)]
    elan_home = os.environ.get("ELAN_HOME") or os.path.join(os.path.expanduser("~"), ".elan")
    if os.path.isdir(elan_home):
        wanted.append(elan_home)
    wanted.append(cwd)
    program = _find_program(command[0], cwd) if command else None
    if program:
        for where in (os.path.abspath(program), os.path.realpath(program)):
            root = _install_root(where)   # `~/bin/lake`: ~/bin alone, never $HOME
            wanted.append(root if secrets_under(root) is None else os.path.dirname(where))
    for arg in command[1:]:
        path = os.path.join(cwd, arg)
        if os.path.isfile(path):
            wanted.append(os.path.dirname(os.path.abspath(path)))
        elif os.path.isdir(path):
            wanted.append(os.path.abspath(path))
    for path in list(wanted):   # a bound link needs its target shown too
        if os.path.islink(path) and not path.startswith(SYSTEM_PATHS):
            wanted.append(os.path.realpath(path))
    return _outermost([os.path.normpath(p) for p in wanted])


def _install_root(program: str) -> str:
    """`/opt/lean/bin/lean` -> `/opt/lean` (its lib/ lies beside bin/); else the program's directory."""
    directory = os.path.dirname(program)
    return os.path.dirname(directory) if os.path.basename(directory) == "bin" else directory


def _outermost(paths: list[str]) -> list[str]:
    """Each path once, in order, leaving out a directory inside one already bound (links kept)."""
    kept: list[str] = []
    for path in paths:
        if path in kept or path == "/":
            continue
        if any(path.startswith(k.rstrip("/") + "/") for k in kept if not os.path.islink(k)):
            continue
        kept = [k for k in kept if os.path.islink(k) or not k.startswith(path.rstrip("/") + "/")]
        kept.append(path)
    return kept


def _find_program(name: str, cwd: str) -> str | None:
    """Where `name` runs from: a path (relative to the project, where the command runs) or a PATH lookup."""
    if "/" in name:
        path = os.path.join(cwd, name)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(name, path=os.environ.get("PATH"))


def find_program(name: str, cwd: str) -> str | None:
    """Where `name` runs from, relative to `cwd` or on PATH (None: nowhere)."""
    return _find_program(name, cwd)


def _box_env() -> dict[str, str]:
    return {name: os.environ[name] for name in ENV_KEPT if name in os.environ}


# --------------------------------------------------------------------------------------------
# Policy: box or refuse
# --------------------------------------------------------------------------------------------

_probed: dict[str, tuple[bool, str]] = {}   # bwrap path -> (ok, detail), once per process
_probe_lock = threading.Lock()


def probe(bwrap: str | None = None, timeout_s: float = 30.0, verify_config: object = None) -> tuple[bool, str]:
    """Whether `bwrap` (default: the one on PATH) exists and runs `true` in the box we use; with
    `verify_config` (the doctor), also whether the binds of its commands show nothing they must not
    (`config_mount_problem`)."""
    bwrap = bwrap or shutil.which("bwrap")
    if not bwrap:
        return False, "`bwrap` not found on PATH"
    if verify_config is not None:   # the doctor: the binds verification would make, first
        problem = config_mount_problem(verify_config)
        if problem is not None:
            return False, problem
    cwd = "/usr"   # bound anyway: the probe shows nothing of the directory it is run from
    command = ["true"]
    argv = bwrap_argv(command, bwrap=bwrap, read_only=read_only_paths(command, cwd), cwd=cwd, env=_box_env())
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"`{bwrap}` did not run: {exc}"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return False, f"`{bwrap}` cannot make the box here: {why}"
    return True, f"`{bwrap}` runs `true` in the box (new namespaces, no network, read-only binds)"


def boxed(command: list[str], box: str, cwd: str | None, writable: Sequence[str] = (),
          what: str = "verify.repl_command") -> list[str]:
    """`command` as it must run under `verify.box`: in the box ("bubblewrap"), or unchanged
    ("none", the explicit opt-out). Raises BackendError, naming the key and the fix, when the
    box is asked for and this machine cannot make it (probed once per bwrap per process), or
    when `command` (from the config key `what`) names no program."""
    if box == "none":
        return list(command)
    if box != "bubblewrap":
        raise BackendError(f"verify.box = {box!r}: must be one of {', '.join(BOX_CHOICES)}")
    if not command:
        raise BackendError(f"{what} is empty")
    cwd = os.path.abspath(cwd or os.getcwd())
    program = program_argv(list(command))
    if not program or _find_program(program[0], cwd) is None:
        raise BackendError(f"{what} = {command}: cannot start `{(program or command)[0]}`: not found")
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise BackendError("verify.box = \"bubblewrap\": `bwrap` not found on PATH, and Lean does not run "
                           "untrusted text unboxed", hint=INSTALL_HINT)
    with _probe_lock:
        if bwrap not in _probed:
            _probed[bwrap] = probe(bwrap)
        ok, detail = _probed[bwrap]
    if not ok:
        raise BackendError(f"verify.box = \"bubblewrap\": {detail}", hint=INSTALL_HINT)
    writable = [os.path.abspath(w) for w in writable]
    read_only = [p for p in read_only_paths(list(command), cwd)
                 if not any(p == w or p.startswith(w + "/") for w in writable)]   # its inputs: bound writable
    problem = mount_problem(read_only, writable, what)
    if problem is not None:
        raise BackendError(f"verify.box = \"bubblewrap\": {problem}",
                           hint="set verify.project_dir to the Lean project, or run from it")
    return bwrap_argv(list(command), bwrap=bwrap, read_only=read_only, writable=writable, cwd=cwd, env=_box_env())


def config_mount_problem(verify_config: object) -> str | None:
    """For the doctor: what the box of each local command of `verify_config` would bind that shows
    $HOME or a credential path (mount_problem), or None."""
    cwd = os.path.abspath(getattr(verify_config, "project_dir", "") or os.getcwd())
    for what in ("repl_command", "lean_command", "kernel_checker_command"):
        command = [arg for arg in getattr(verify_config, what, None) or [] if "{" not in arg]
        if command:
            problem = mount_problem(read_only_paths(command, cwd), (), f"verify.{what}")
            if problem is not None:
                return problem
    return None
