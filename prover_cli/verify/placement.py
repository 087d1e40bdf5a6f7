"""Where verification runs: the one seam a backend changes, so it can never change what is computed.

    with verification_at(placement):      # on_modal/functions.py: REPLs and kernel steps in Sandboxes
        verify_file(config, proofs_path=...)

`engine.verify_file`, `engine.verify_records` and `engine.Verifier` ask `place()` for their REPL
transport, their kernel-stage runner and the `[verify]` config as it holds *there* (the commands
and paths of the machine the processes run on). A caller that passes its own `transport_factory`
or `kernel_runner` has chosen the place itself: the placement is then not consulted at all.
Without a placement everything runs here, exactly as before this seam existed (`LOCAL`).

What a placement may change: where the REPL processes and the kernel stage's steps run, the
commands and paths that start them there, how many run at once, and when a process is recycled;
never the verdict rules, the policy (`engine.policy_digest`), the summary or the resume.

The placement is process-wide, not a contextvar: verification started from any thread of the
call must run at the same place (a contextvar starts empty in each new thread on Python 3.11),
and a Modal container runs one call at a time. Placements nest; the innermost one holds. A
thread may also enter one for itself alone (`this_thread=True`: an ES share's warm pool,
on_modal/pipeline.py), which holds over the process-wide one for that thread only.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from prover_cli.config import VerifyConfig


def _as_configured(verify_config: VerifyConfig, proofs: int | None) -> VerifyConfig:
    return verify_config


@dataclass(frozen=True, eq=False)   # eq=False: two placements are the same only if they are one object
class Placement:
    """Where the processes of one verification run: each field is a function of the placed config."""

    where: str                                                     # for messages only; never in a result
    # (verify_config, proofs to check or None when unknown) -> the config as it holds there
    configure: Callable[[Any, int | None], Any] = _as_configured
    # placed verify_config -> a TransportFactory for the REPL pool (None: local subprocesses)
    transport_factory: Callable[[Any], Any] | None = None
    # placed verify_config -> an isolated.Runner for the kernel stage's steps (None: local processes)
    kernel_runner: Callable[[Any], Any] | None = None
    # False: `verify_records(..., keep_warm=True)` starts and stops its processes per call (a warm
    # process there would be billed while it idles between batches), and each REPL process ends
    # after its last proof of a call (engine.Verifier: ReplPool's release_idle)
    keep_warm: bool = True


LOCAL = Placement("local")

_STACK: list[Placement] = []
_LOCK = threading.Lock()
# Called with a placement as its block ends. engine.py registers the closing of the warm verifiers
# made there (their processes belong to that place); a hook keeps this module below engine.py.
_WHEN_LEFT: list[Callable[[Placement], None]] = []


def when_left(hook: Callable[[Placement], None]) -> None:
    """Run `hook(placement)` whenever a `verification_at` block ends."""
    _WHEN_LEFT.append(hook)


_THIS_THREAD = threading.local()   # .stack: placements entered with `this_thread=True` by this thread


def current() -> Placement:
    """The innermost placement this thread entered for itself, else the innermost process-wide
    one, else LOCAL."""
    own = getattr(_THIS_THREAD, "stack", None)
    if own:
        return own[-1]
    with _LOCK:
        return _STACK[-1] if _STACK else LOCAL


@contextlib.contextmanager
def verification_at(placement: Placement, *, this_thread: bool = False) -> Iterator[Placement]:
    """Verification started inside the block runs at `placement`; warm verifiers made there are
    closed when the block ends (their processes belong to that place). `this_thread=True`: only
    for verification this thread starts (one ES share's verification thread beside another's in
    one process), over the process-wide placement."""
    if this_thread:
        stack = _THIS_THREAD.__dict__.setdefault("stack", [])
        stack.append(placement)
    else:
        with _LOCK:
            _STACK.append(placement)
    try:
        yield placement
    finally:
        if this_thread:
            stack.remove(placement)
        else:
            with _LOCK:
                # remove this entry (the innermost one unless blocks were left out of order)
                for k in range(len(_STACK) - 1, -1, -1):
                    if _STACK[k] is placement:
                        del _STACK[k]
                        break
        for hook in list(_WHEN_LEFT):
            hook(placement)


@dataclass(frozen=True)
class Placed:
    """What one verifier runs with: the config as it holds there, its REPL pipes and kernel runner."""

    config: VerifyConfig
    transport_factory: Any
    kernel_runner: Any
    placement: Placement | None   # None: the caller chose the place (explicit factory or runner)


def place(verify_config: VerifyConfig, *, transport_factory: Any = None, kernel_runner: Any = None,
          proofs: int | None = None) -> Placed:
    """The caller's own transport/runner when it passed either (config unchanged), else the
    current placement's, with the config it gives for `proofs` proofs."""
    if transport_factory is not None or kernel_runner is not None:
        return Placed(verify_config, transport_factory, kernel_runner, None)
    placement = current()
    config = placement.configure(verify_config, proofs)
    return Placed(config,
                  placement.transport_factory(config) if placement.transport_factory is not None else None,
                  placement.kernel_runner(config) if placement.kernel_runner is not None else None,
                  placement)
