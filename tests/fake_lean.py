#!/usr/bin/env python3
"""A stand-in for `lean -o OUT.olean FILE.lean`, the command the kernel stage elaborates with. NOT Lean.

Command line, exit codes and output lines as in lean4 `src/util/shell.cpp` (`lean_main`, read
at 0283b20de7b58cb93821d9ea079b4ac2e4eba92a):
- options `-o FILE` / `--o=FILE`, `--root=DIR` (`-R DIR`); anything else: `Unknown command line
  option`, exit 1; not exactly one file name: `Expected exactly one file name`, exit 1;
- the module name comes from the file's path under the root (default: the working directory);
  a file outside it: `input file 'F' must be contained in root directory (R/)` (lean4
  `src/Lean/Util/Path.lean`, `moduleNameOfFileName`), exit 1;
- messages go to stdout as `FILE:LINE:COL: SEVERITY: TEXT`; the .olean is written only when there
  was no error (`if (olean_fn && ok) write_module(...)`), and the exit code is `ok ? 0 : 1`.

What it "elaborates" is `fake_kernel_model.py`'s model (see there); the file it writes is that
model's stand-in .olean, which only `tests/fake_safe_verify.py` reads. Errors: `fake_error` /
`fake_kernel_error` markers (message texts from the REPL's recorded transcripts), a false closed
arithmetic statement proved without `sorry` or an axiom, a name declared twice, and
`fake_header_error` in an import line. `sorry` gives `declaration uses 'sorry'` (a warning).

Markers that simulate code run *during elaboration* (what the kernel stage must survive): the
module written is forged and the exit code is 0 whatever happened.
    fake_forge_ignore_errors   write the module although it has errors
    fake_forge_axiom           add `axiom prover_forged_ax : False`; the last theorem's value uses it
    fake_forge_retype          the last theorem's type becomes `: True`
    fake_forge_drop            the last theorem is left out
    fake_forge_imports         the imports become [Init] alone
    fake_forge_unsafe          the last theorem is marked `unsafe` (the replay skips it)
    fake_forge_skip_kernel     add `theorem prover_forged_false : False := True.intro`
    fake_forge_garbage         write bytes that are not an .olean
    fake_forge_corrupt         write a valid header followed by garbage
Other markers: fake_hang (never ends), fake_segfault (dies of SIGSEGV).
"""

from __future__ import annotations

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fake_kernel_model as model  # noqa: E402


def main(argv: list[str]) -> int:
    olean = None
    root = None
    files = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "-o" and args:
            olean = args.pop(0)
        elif arg.startswith("--o="):
            olean = arg[len("--o="):]
        elif arg.startswith("-o") and len(arg) > 2:
            olean = arg[2:]
        elif arg.startswith("--root="):
            root = arg[len("--root="):]
        elif arg in ("-R", "--root") and args:
            root = args.pop(0)
        elif arg.startswith("-"):
            sys.stderr.write("Unknown command line option\n")
            return 1
        else:
            files.append(arg)
    if len(files) != 1:
        sys.stderr.write("Expected exactly one file name\n")
        return 1
    path = files[0]
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        sys.stderr.write(f"file '{path}' not found\n")
        return 1
    root_dir = os.path.realpath(root or os.getcwd()).rstrip("/") + "/"
    full = os.path.realpath(path)
    if olean is not None and not full.startswith(root_dir):
        sys.stderr.write(f"input file '{path}' must be contained in root directory ({root_dir})\n")
        return 1
    module = os.path.splitext(full[len(root_dir):])[0].replace("/", ".") if full.startswith(root_dir) else "_stdin"

    markers = set(model.MARKER.findall(model.blank_comments(text)))
    if "fake_hang" in markers:
        while True:
            time.sleep(3600)
    if "fake_segfault" in markers:
        os.kill(os.getpid(), signal.SIGSEGV)

    imports, constants, errors = model.parse_module(text)
    header_lines = [k + 1 for k, line in enumerate(text.splitlines()) if line.lstrip().startswith("import ")]
    if "fake_header_error" in markers and header_lines:
        errors.append((header_lines[0], "unknown module prefix 'fake_header_error'"))
    errors += model.elaboration_errors(constants)
    for line, message in sorted(errors):
        sys.stdout.write(f"{path}:{line}:0: error: {message}\n")
    for const in constants:
        if model.uses_sorry(const):
            sys.stdout.write(f"{path}:{const['line']}:8: warning: declaration uses 'sorry'\n")
    sys.stdout.flush()

    forged = {m[len("fake_forge_"):] for m in markers if m.startswith("fake_forge_")}
    if not forged:
        if errors:
            return 1
        if olean is not None:
            with open(olean, "wb") as handle:
                handle.write(model.olean_bytes(module, imports, constants))
        return 0
    if olean is not None:
        with open(olean, "wb") as handle:
            handle.write(forge(forged, module, imports, constants))
    return 0


def forge(modes: set[str], module: str, imports: list[str], constants: list[dict]) -> bytes:
    """The module as code run during elaboration could leave it."""
    if "garbage" in modes:
        return b"this is not an olean\n"
    if "corrupt" in modes:
        return model.OLEAN_HEADER + b"\x00\xff garbage where the compacted region should be"
    constants = [dict(c) for c in constants]
    theorems = [c for c in constants if c["kind"] == "theorem"]
    last = theorems[-1] if theorems else None
    if "axiom" in modes and last is not None:
        constants.insert(0, {"name": "prover_forged_ax", "kind": "axiom", "levelParams": [], "type": ": False",
                             "value": None, "unsafe": False, "partial": False, "line": 1})
        last["value"] = "prover_forged_ax.elim"
    if "retype" in modes and last is not None:
        last["type"] = ": True"
    if "unsafe" in modes and last is not None:
        last["unsafe"] = True
    if "drop" in modes and last is not None:
        constants.remove(last)
    if "skip_kernel" in modes:
        constants.append({"name": "prover_forged_false", "kind": "theorem", "levelParams": [], "type": ": False",
                          "value": "True.intro", "unsafe": False, "partial": False, "line": 1})
    if "imports" in modes:
        imports = ["Init"]
    return model.olean_bytes(module, imports, constants)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
