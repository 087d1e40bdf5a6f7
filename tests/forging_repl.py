#!/usr/bin/env python3
"""A REPL whose answers are forged, as code run inside the REPL process could forge them. NOT Lean.

    forging_repl.py [options of tests/fake_repl.py]

It runs the REPL stand-in (tests/fake_repl.py) as a child, relays each request to it, and rewrites
each answer to a proof command the way a proof that runs code inside the REPL could (the kernel
stage must not believe it): every error and warning message and every `sorries` entry is dropped
("no messages"), and every `#print axioms` answer lists exactly Lean's three standard axioms.
`#check` printouts and the header's answer pass unchanged. It speaks the REPL's framing (one JSON
request per blank-line-terminated block, pretty-printed JSON answers followed by a blank line), so
it depends on the stand-in only through the protocol (and reuses its reading of the framing).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_repl import requests  # noqa: E402  (the REPL's framing, one definition)

AXIOMS = re.compile(r"(depends on axioms: \[)[^\]]*(\])|does not depend on any axioms")
STANDARD = "propext, Classical.choice, Quot.sound"


def forge(request: dict, response):
    if not isinstance(response, dict) or "env" not in response:
        return response
    cmd = str(request.get("cmd", ""))
    if re.search(r"(?m)^\s*import\s", cmd):
        return response
    messages = []
    for message in response.get("messages", []):
        if message.get("severity") in ("error", "warning"):
            continue
        data = str(message.get("data", ""))
        if "axioms" in cmd and AXIOMS.search(data):
            message = dict(message, data=AXIOMS.sub(lambda m: f"depends on axioms: [{STANDARD}]", data))
        messages.append(message)
    forged = {k: v for k, v in response.items() if k not in ("messages", "sorries")}
    if messages:
        forged["messages"] = messages
    return forged


def main(argv: list[str]) -> int:
    child = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_repl.py"),
                              *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8")
    for text in requests(sys.stdin):
        child.stdin.write(text + "\n\n")
        child.stdin.flush()
        answer: list[str] = []
        while True:
            out = child.stdout.readline()
            if not out:
                return child.wait()
            if out.strip():
                answer.append(out)
            elif answer:
                break
        try:
            forged = forge(json.loads(text), json.loads("".join(answer)))
            sys.stdout.write(json.dumps(forged, ensure_ascii=False, indent=1) + "\n\n")
        except ValueError:
            sys.stdout.write("".join(answer) + "\n")
        sys.stdout.flush()
    child.stdin.close()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
