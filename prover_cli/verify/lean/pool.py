"""A pool of `verify.workers` REPL processes, each driven by one thread while a batch runs.

Per process: the header runs once (its env is cached per header text); the trusted statement is
declared once per problem in the header's env (`rules.trusted_command`, cached per process), and
every proof of that problem runs in the env it returns, followed by Lean's statement and axiom
check (`rules.alias_command`) in the env the proof produced. A proof gets `verify.timeout_s` of
wall-clock time for its commands together. At each REPL start the toolchain's version is read and
checked against what we send (`toolchain.py`). Before the first proof on a toolchain the canary
runs (`canary.py`). After a record whose text could run code under the policy in force
(`Candidate.may_run_code`: `native_decide` when allowed, a widened command), or that the text
alone says could have (`lexer.text_may_run_code`: a string or char literal, a quote read by the
token table, a code-running word anywhere, text that does not lex), the process is recycled, as
it is after `verify.max_proofs_per_process` proofs. A REPL killed by a signal from
outside (the OOM killer) while checking a proof, or while running the header before it, is not
the proof's fault: the proof is retried once in a fresh process; a second death is `error` naming
the signal (during the header again: a BackendError, since the machine, not a proof, is at
fault). Any other exception while checking one proof is that proof's `error`. On a timeout, crash, EOF,
garbage or protocol error the whole process group is killed and the proof gets its verdict
(`timeout` or `error`); the next proof on that worker starts a fresh process (header re-run).
After `verify.max_proofs_per_process` proofs a process is recycled the same way, because Lean's
memory only grows with every environment it keeps.

Failures that are not the proof's fault stop the batch with a BackendError instead of writing a
verdict: the REPL cannot start, the header does not elaborate, or the header outlives
`verify.header_timeout_s`. A verdict file never records "our machine was broken" as a property of
a proof, so a rerun after fixing the machine checks those proofs again.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING, AbstractSet, Callable, Iterable

from prover_cli.errors import BackendError
from prover_cli.verify.lean import canary
from prover_cli.verify.text.lexer import text_may_run_code
from prover_cli.verify.lean.repl import ReplDied, ReplFault, ReplProcess, ReplTimeout
from prover_cli.verify.text.rules import (
    Verdict,
    alias_command,
    allowed_axioms,
    is_error,
    judge_alias,
    judge_proof,
    protocol_problem,
    read_trusted_namespace,
    trusted_command,
)
from prover_cli.verify.text.statement import BadRecord, Candidate, trusted_signature
from prover_cli.verify.lean.toolchain import Version, check_capabilities
from prover_cli.verify.lean.transport import TransportFactory, local_transport_factory, signal_name

if TYPE_CHECKING:
    from prover_cli.config import VerifyConfig

OnVerdict = Callable[[Candidate, Verdict], None]


class _Fatal:
    def __init__(self, error: BaseException):
        self.error = error


class _KilledFromOutside(Exception):
    """The REPL died of a signal we did not send while checking a proof or running its header
    (retry the proof once, in a fresh process)."""

    def __init__(self, number: int, reason: str, during_header: bool = False):
        super().__init__(reason)
        self.number = number
        self.reason = reason
        self.signal_name = signal_name(number)
        self.during_header = during_header


class ReplPool:
    """`verify.workers` REPL processes. `transport_factory` makes the byte pipe of each (a new,
    unstarted `Transport` per call); None means local subprocesses from `verify.repl_command`.
    `release_idle`: a worker that finds no proof left in `run` ends its process at once (a place
    that bills an idle process, Modal's Sandboxes: it is not kept up while the kernel stage or the
    other workers finish); the next `run` starts it again, header and all."""

    def __init__(self, verify_config: VerifyConfig, transport_factory: TransportFactory | None = None,
                 release_idle: bool = False):
        self.config = verify_config
        self.release_idle = release_idle
        self.allowed = allowed_axioms(verify_config)
        self.transport_factory = transport_factory or local_transport_factory(verify_config)
        self.processes = [ReplProcess(self.transport_factory()) for _ in range(verify_config.workers)]
        self._canary_done = not verify_config.canary
        self.lean_version: Version | None = None   # detected at each REPL start (toolchain.py)

    def run(self, candidates: Iterable[Candidate], on_verdict: OnVerdict) -> None:
        """Check every candidate; `on_verdict` is called in *this* thread as each verdict is known."""
        jobs: queue.Queue = queue.Queue()
        total = 0
        for candidate in candidates:
            jobs.put(candidate)
            total += 1
        if total == 0:
            return
        if not self._canary_done:
            canary.ensure_canary(self)   # BackendError naming the rule when this toolchain breaks one
            self._canary_done = True
        results: queue.Queue = queue.Queue()
        stop = threading.Event()
        threads = [threading.Thread(target=self._work, args=(proc, jobs, results, stop),
                                    name=f"repl-worker-{k}", daemon=True)
                   for k, proc in enumerate(self.processes[:total])]
        fatal: BaseException | None = None
        finished = False
        try:
            for thread in threads:   # inside the try: a Ctrl-C here still stops the started ones
                thread.start()
            for _ in range(total):
                item = results.get()
                if isinstance(item, _Fatal):
                    fatal = item.error
                    break
                on_verdict(*item)
            else:
                finished = True
        finally:
            stop.set()
            for thread in threads:
                while thread.ident is not None and thread.is_alive():
                    if not finished:
                        # Stopping early (fatal error, Ctrl-C, a failing callback): signal the
                        # process groups so workers blocked on a read see EOF now instead of at
                        # their deadline; again until they return, since a worker that was still
                        # starting its REPL had no process group to signal the first time.
                        for proc in self.processes:
                            proc.signal_kill()
                    thread.join(0.2)
        if fatal is not None:
            raise fatal

    def _work(self, proc: ReplProcess, jobs: queue.Queue, results: queue.Queue,
              stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                candidate = jobs.get_nowait()
            except queue.Empty:
                if self.release_idle:
                    proc.kill()   # no proof left for it in this run: its Sandbox ends now
                return
            try:
                verdict = self.check(proc, candidate)
            except BackendError as exc:  # the machine, not the proof: stop the batch and say so
                proc.kill()
                results.put(_Fatal(exc))
                return
            except Exception as exc:  # anything else while sending or judging: this proof only
                proc.kill()           # the process is in a state we do not know
                verdict = Verdict("error", f"could not check this proof: {type(exc).__name__}: {exc}")
            except BaseException as exc:  # KeyboardInterrupt and the like: stop
                proc.kill()
                results.put(_Fatal(exc))
                return
            if stop.is_set():
                return  # the batch was stopped: this verdict may come from a killed process
            results.put((candidate, verdict))

    def check(self, proc: ReplProcess, candidate: Candidate, allowed: AbstractSet[str] | None = None) -> Verdict:
        """One proof on one process: header (cached), the trusted statement (cached per problem
        and process), the proof command, then the statement and axiom check (`alias_command`).

        A REPL killed by a signal from outside (the OOM killer, `kill -9`), during the proof or
        the header before it, is not the proof's fault: the proof is retried once in a fresh
        process; a second such death is `error` (during the header: a BackendError).
        """
        allowed = self.allowed if allowed is None else allowed
        start = time.monotonic()
        try:
            verdict = self._check_once(proc, candidate, allowed)
        except _KilledFromOutside as first:
            try:
                verdict = self._check_once(proc, candidate, allowed)
            except _KilledFromOutside as second:
                if second.during_header:  # nothing of the proof's ran: the machine is killing REPLs
                    raise BackendError(f"the REPL was killed by {second.signal_name} while running the header, "
                                       f"after a first kill ({first.signal_name}) and one retry: {second.reason}",
                                       hint="if the REPLs are killed for memory, raise verify.memory_limit_gb or "
                                            "lower verify.workers; run `prover doctor`") from None
                verdict = Verdict("error", f"the REPL was killed by {second.signal_name} while checking this "
                                  f"proof, twice (retried once in a fresh REPL after {first.signal_name}): "
                                  f"{second.reason}")
        verdict.time_s = round(time.monotonic() - start, 4)
        proc.proofs_done += 1
        if proc.alive and (candidate.may_run_code or text_may_run_code(candidate.body)
                           or proc.proofs_done >= self.config.max_proofs_per_process):
            # recycle: Lean's memory only grows; and code a proof ran (native_decide, a widened
            # command) may have changed the process (output, linters). Judged by the text too, not
            # only by the policy: a text the lexer could not fully classify (a literal, a quote read
            # by the token table) or that names code anywhere, had a lexer gap let code through,
            # may have run it. The next proof gets a fresh process either way.
            proc.kill()
        return verdict

    def _check_once(self, proc: ReplProcess, candidate: Candidate, allowed: AbstractSet[str]) -> Verdict:
        header_env = self._header_env(proc, candidate.header)
        try:
            # the trusted statement, declared before any untrusted text (once per problem and process;
            # the problem's cost, not the proof's: its own deadline)
            trusted = self._trusted_env(proc, candidate, header_env)
            if isinstance(trusted, Verdict):
                return trusted
            env, namespace = trusted
            deadline = time.monotonic() + self.config.timeout_s
            response = proc.request({"cmd": candidate.body, "env": env}, deadline)
            verdict = judge_proof(response)
            if verdict is None:
                answer = proc.request({"cmd": alias_command(namespace, candidate.target), "env": response["env"]},
                                      deadline)
                verdict = judge_alias(answer, candidate.target, allowed, response.get("messages", []))
            if verdict.status == "error":
                proc.kill()  # a protocol error leaves the process in a state we do not know
            return verdict
        except ReplFault as exc:
            return self._fault_verdict(proc, exc)

    def _fault_verdict(self, proc: ReplProcess, exc: ReplFault) -> Verdict:
        number = proc.exit_signal() if isinstance(exc, ReplDied) else None
        proc.kill()
        if number is not None:
            raise _KilledFromOutside(number, str(exc))
        if isinstance(exc, ReplTimeout):
            return Verdict(exc.kind, f"no answer within verify.timeout_s = {self.config.timeout_s:g} s (REPL killed)")
        return Verdict(exc.kind, str(exc))

    def _trusted_env(self, proc: ReplProcess, candidate: Candidate, header_env: int) -> tuple[int, str] | Verdict:
        """The environment where the trusted statement is declared as `_prover_trusted` (the
        proof runs there), and the namespace the header leaves open; cached per problem in this
        process. A statement that does not elaborate is the record's problem (`error`)."""
        key = (candidate.header, candidate.statement)
        cached = proc.trusted_envs.get(key)
        if cached is not None:
            return cached
        if not candidate.statement:
            return Verdict("error", "internal: no trusted statement to check the target against")
        try:
            command = trusted_command(trusted_signature(candidate.statement))
        except BadRecord as exc:
            return Verdict("error", f"the trusted statement cannot be restated: {exc}")
        response = proc.request({"cmd": command, "env": header_env}, time.monotonic() + self.config.timeout_s)
        namespace, why = read_trusted_namespace(response)
        if namespace is None:
            if protocol_problem(response):
                proc.kill()
            return Verdict("error", f"the trusted statement does not elaborate in the header's environment: {why}")
        proc.trusted_envs[key] = (response["env"], namespace)
        return response["env"], namespace

    def _header_env(self, proc: ReplProcess, header: str) -> int:
        if not proc.alive:
            proc.kill()  # reap a process that died between proofs
            # the toolchain this REPL runs must have every form we send (BackendError naming it)
            self.lean_version = check_capabilities(self.config)
            proc.start()
        env = proc.header_envs.get(header)
        if env is not None:
            return env
        timeout_s = self.config.header_timeout_s
        try:
            response = proc.request({"cmd": header}, time.monotonic() + timeout_s)
        except ReplTimeout:
            proc.kill()
            raise BackendError(f"the header did not finish within verify.header_timeout_s = {timeout_s:g} s "
                               f"(header starts {header[:60]!r})") from None
        except ReplFault as exc:
            number = proc.exit_signal() if isinstance(exc, ReplDied) else None
            proc.kill()
            if number is not None:  # killed from outside (the OOM killer, kill -9): retried once, as a proof is
                raise _KilledFromOutside(number, str(exc), during_header=True) from None
            raise BackendError(f"the REPL failed while running the header: {exc}",
                               hint="run `prover doctor`; if the REPL was killed for memory, raise "
                                    "verify.memory_limit_gb") from None
        problem = protocol_problem(response)
        errors = [] if problem else [m for m in response.get("messages", []) if is_error(m)]
        if problem or errors:
            proc.kill()
            why = problem or str(errors[0].get("data", "")).strip()[:300]
            raise BackendError(f"the header does not elaborate: {why} (header starts {header[:60]!r})",
                               hint="check verify.header / the records' `header`, verify.project_dir, "
                                    "and run `prover doctor`")
        proc.header_envs[header] = response["env"]
        return response["env"]

    def close(self) -> None:
        for proc in self.processes:
            proc.kill()
