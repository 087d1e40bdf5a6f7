"""A stand-in for bubblewrap's `bwrap` that checks its argv as bwrap does, then runs the command.

    python fake_bwrap.py [OPTIONS...] [--] COMMAND [ARGS...]

It isolates nothing: no namespace, no mount, nothing is read-only. It exists so the tests check
the box's argv on machines without bwrap (tests/conftest.py puts it first on PATH as `bwrap`);
what the box really prevents is tested against the real bwrap (tests/test_verify_box.py, skipped
where there is none). It is at least as strict as bwrap 0.8.0 on the argv (containers/bubblewrap,
bubblewrap.c `parse_args_recurse` and `main`, tag v0.8.0, commit
4ab175fe6d3a4053444b04d805a6d686f53455b9), with bwrap's messages (`die()` in utils.c prints
`bwrap: ` + message and exits 1):

- an option it does not know: `bwrap: Unknown option X`; one short of its arguments:
  `bwrap: --X takes an argument` / `… two arguments`; options end at `--` or at the first
  argument not starting with `-`; no command: the usage text, exit 1;
- a bind whose source does not exist (not a `-try` variant): `bwrap: Can't find source path S:
  No such file or directory`;
- `--clearenv`, `--setenv`, `--unsetenv` applied in order, as bwrap applies them while parsing,
  so the command gets that environment and nothing else;
- `--chdir D` where D is not shown in the box: `bwrap: Can't chdir to D: No such file or directory`;
- the command is looked up on the box's PATH (bwrap's `execvp`) and must be shown in the box,
  with its `#!` interpreter or ELF loader (the shared libraries the loader then opens are not
  looked for): `bwrap: execvp X: No such file or directory`;
- `--cap-drop`/`--cap-add` of something not ALL or a CAP_ name: `bwrap: unknown cap: X`.

"Shown in the box" follows the mounts in order: a path is shown when the last mount over it is a
bind (mounts stack: a tmpfs on /tmp after a bind of /tmp/x hides it), not when it is a tmpfs,
/dev or /proc (a fresh one holds none of the host's files); a `--symlink` redirects the lookup.
Options bwrap has and our box does not use (fd-passing, overlays, labels, `--perms`, `--size`, …)
are refused with `bwrap-stand-in: not modelled: X` (exit 1): failing closed, not guessing.
"""

from __future__ import annotations

import os
import re
import struct
import sys

NO_ARG = {"--unshare-all", "--unshare-user", "--unshare-user-try", "--unshare-ipc", "--unshare-pid",
          "--unshare-net", "--unshare-uts", "--unshare-cgroup", "--unshare-cgroup-try", "--share-net",
          "--disable-userns", "--assert-userns-disabled", "--clearenv", "--new-session", "--die-with-parent",
          "--as-pid-1"}
ONE_ARG = {"--chdir", "--proc", "--dev", "--tmpfs", "--mqueue", "--dir", "--unsetenv", "--cap-add", "--cap-drop",
           "--remount-ro", "--hostname", "--uid", "--gid"}
TWO_ARGS = {"--bind", "--bind-try", "--ro-bind", "--ro-bind-try", "--dev-bind", "--dev-bind-try", "--symlink",
            "--setenv"}
# bwrap 0.8.0 has these too; the box uses none of them, so the stand-in does not pretend to model them.
NOT_MODELLED = {"--args", "--exec-label", "--file-label", "--file", "--bind-data", "--ro-bind-data", "--lock-file",
                "--sync-fd", "--block-fd", "--userns-block-fd", "--info-fd", "--json-status-fd", "--seccomp",
                "--add-seccomp-fd", "--userns", "--userns2", "--pidns", "--perms", "--size", "--chmod"}
# bwrap's own wording for `die ("--X takes … argument")` (most say "an", --chdir/--remount-ro say "one")
ONE_WORD = {"--chdir": "one", "--remount-ro": "one"}
USAGE = "usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]\n"


def die(message: str) -> None:
    sys.stderr.write(f"bwrap: {message}\n")
    sys.exit(1)


def main(args: list[str]) -> None:
    env = dict(os.environ)
    mounts: list[tuple[str, str]] = []     # (kind, dest) in order: kind "bind", "fresh" or "link:TARGET"
    chdir = None
    k = 0
    while k < len(args):
        arg = args[k]
        if arg in ("--help", "--version"):
            die(f"{arg}: not modelled by the stand-in")
        if arg == "--":
            k += 1
            break
        if not arg.startswith("-"):
            break
        if arg in NOT_MODELLED:
            sys.stderr.write(f"bwrap-stand-in: not modelled: {arg}\n")
            sys.exit(1)
        if arg in NO_ARG:
            if arg == "--clearenv":
                env.clear()
            k += 1
            continue
        need = 1 if arg in ONE_ARG else 2 if arg in TWO_ARGS else None
        if need is None:
            die(f"Unknown option {arg}")
        if len(args) - k - 1 < need:
            die(f"{arg} takes {'two' if need == 2 else ONE_WORD.get(arg, 'an')} argument{'s' if need == 2 else ''}")
        values = args[k + 1:k + 1 + need]
        k += 1 + need
        if arg in ("--bind", "--ro-bind", "--dev-bind", "--bind-try", "--ro-bind-try", "--dev-bind-try"):
            source, dest = values
            if not os.path.exists(source):
                if arg.endswith("-try"):
                    continue
                die(f"Can't find source path {source}: No such file or directory")
            if os.path.normpath(source) != os.path.normpath(dest):
                sys.stderr.write(f"bwrap-stand-in: not modelled: {arg} to another place ({source} -> {dest})\n")
                sys.exit(1)
            mounts.append(("bind", os.path.normpath(dest)))
        elif arg in ("--tmpfs", "--dev", "--proc", "--mqueue", "--dir"):
            mounts.append(("fresh", os.path.normpath(values[0])))
        elif arg == "--symlink":
            target, dest = values
            mounts.append(("link:" + target, os.path.normpath(dest)))
        elif arg == "--setenv":
            env[values[0]] = values[1]
        elif arg == "--unsetenv":
            env.pop(values[0], None)
        elif arg == "--chdir":
            chdir = values[0]
        elif arg in ("--cap-drop", "--cap-add"):
            if values[0].upper() != "ALL" and not re.fullmatch(r"CAP_[A-Z_]+", values[0].upper()):
                die(f"unknown cap: {values[0]}")
    command = args[k:]
    if not command:
        sys.stderr.write(USAGE)
        sys.exit(1)
    if chdir is not None:
        fresh_top = any(kind == "fresh" and dest == os.path.normpath(chdir) for kind, dest in mounts)
        if not (fresh_top or (shown(chdir, mounts) and os.path.isdir(chdir))):
            die(f"Can't chdir to {chdir}: No such file or directory")
        os.chdir(chdir)
    program = find_program(command[0], env.get("PATH", ""), mounts)
    if program is None:
        die(f"execvp {command[0]}: No such file or directory")
    os.execve(program, command, env)


def shown(path: str, mounts: list[tuple[str, str]], depth: int = 0) -> bool:
    """Whether the host's `path` is what the box shows at `path` (see the module docstring)."""
    path = os.path.normpath(os.path.abspath(path))
    if depth > 16:
        return False
    covering = [(kind, dest) for kind, dest in mounts if path == dest or path.startswith(dest.rstrip("/") + "/")]
    if not covering:
        return False   # bwrap's new root is an empty tmpfs: nothing of the host is there
    kind, dest = covering[-1]   # mounts stack: the last one over this path is what it shows
    if kind.startswith("link:"):
        target = kind[len("link:"):]
        target = target if target.startswith("/") else os.path.join(os.path.dirname(dest), target)
        return shown(os.path.join(target, os.path.relpath(path, dest)), mounts, depth + 1)
    if kind == "fresh":
        return False
    # a link inside a bind is followed in the box: its target must be shown as well
    real = os.path.realpath(path)
    return real == path or shown(real, mounts, depth + 1)


def find_program(name: str, path_variable: str, mounts: list[tuple[str, str]]) -> str | None:
    candidates = [name] if "/" in name else [os.path.join(d or ".", name) for d in path_variable.split(":")]
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK) and shown(candidate, mounts):
            interpreter = interpreter_of(candidate)
            if interpreter is None or shown(interpreter, mounts):
                return candidate
    return None


def interpreter_of(program: str) -> str | None:
    """What the kernel must also find for execve to work: a script's `#!` interpreter, a dynamic
    ELF's loader (PT_INTERP); missing, execve fails with ENOENT (seen with the real bwrap: a box
    with /usr but no /lib64 link answers `execvp /usr/bin/true: No such file or directory`)."""
    with open(program, "rb") as f:
        head = f.read(64)
        if head.startswith(b"#!"):
            f.seek(0)
            line = f.readline(4096)[2:].strip().split()
            return line[0].decode("utf-8", "replace") if line else None
        if head[:4] != b"\x7fELF" or head[4] != 2:   # 64-bit ELF only (the machines we run on)
            return None
        endian = "<" if head[5] == 1 else ">"
        phoff, = struct.unpack_from(endian + "Q", head, 32)
        phentsize, phnum = struct.unpack_from(endian + "HH", head, 54)
        for k in range(phnum):
            f.seek(phoff + k * phentsize)
            kind, _, offset, _, _, size = struct.unpack(endian + "IIQQQQ", f.read(40))
            if kind == 3:   # PT_INTERP
                f.seek(offset)
                return f.read(size).rstrip(b"\0").decode("utf-8", "replace")
    return None


if __name__ == "__main__":
    main(sys.argv[1:])
