"""A pool of `verify.workers` REPL processes, each driven by one thread while a batch runs.

Per process: the header runs once (its env is cached per header text), then every proof runs in
that env (`"env": N`) followed by `#print axioms <target>` in the env the proof produced. A proof
gets `verify.timeout_s` of wall-clock time for both commands together. On a timeout, crash, EOF,
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
from typing import Any, Callable, Iterable

from prover_cli.errors import BackendError
from prover_cli.verify.repl import ReplFault, ReplProcess, ReplTimeout
from prover_cli.verify.rules import (
    Verdict,
    allowed_axioms,
    is_error,
    judge_axioms_response,
    judge_proof,
    protocol_problem,
)
from prover_cli.verify.statement import Candidate

OnVerdict = Callable[[Candidate, Verdict], None]


class _Fatal:
    def __init__(self, error: BaseException):
        self.error = error


class ReplPool:
    def __init__(self, verify_config: Any):
        self.config = verify_config
        self.allowed = allowed_axioms(verify_config)
        self.processes = [
            ReplProcess(verify_config.repl_command, verify_config.project_dir, verify_config.memory_limit_gb)
            for _ in range(verify_config.workers)
        ]

    def run(self, candidates: Iterable[Candidate], on_verdict: OnVerdict) -> None:
        """Check every candidate; `on_verdict` is called in *this* thread as each verdict is known."""
        jobs: queue.Queue = queue.Queue()
        total = 0
        for candidate in candidates:
            jobs.put(candidate)
            total += 1
        if total == 0:
            return
        results: queue.Queue = queue.Queue()
        stop = threading.Event()
        threads = [threading.Thread(target=self._work, args=(proc, jobs, results, stop),
                                    name=f"repl-worker-{k}", daemon=True)
                   for k, proc in enumerate(self.processes[:total])]
        for thread in threads:
            thread.start()
        fatal: BaseException | None = None
        finished = False
        try:
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
            if not finished:
                # Stopping early (fatal error, Ctrl-C, a failing callback): signal the process
                # groups so workers blocked on a read see EOF now instead of at their deadline.
                for proc in self.processes:
                    proc.signal_kill()
            for thread in threads:
                thread.join()
        if fatal is not None:
            raise fatal

    def _work(self, proc: ReplProcess, jobs: queue.Queue, results: queue.Queue,
              stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                candidate = jobs.get_nowait()
            except queue.Empty:
                return
            try:
                verdict = self.check(proc, candidate)
            except BaseException as exc:  # BackendError, or a bug: stop the batch and say so
                proc.kill()
                results.put(_Fatal(exc))
                return
            if stop.is_set():
                return  # the batch was stopped: this verdict may come from a killed process
            results.put((candidate, verdict))

    def check(self, proc: ReplProcess, candidate: Candidate) -> Verdict:
        """One proof on one process: header (cached), proof command, `#print axioms`."""
        env = self._header_env(proc, candidate.header)
        start = time.monotonic()
        deadline = start + self.config.timeout_s
        try:
            response = proc.request({"cmd": candidate.body, "env": env}, deadline)
            verdict = judge_proof(response)
            if verdict is None:
                axioms = proc.request({"cmd": f"#print axioms {candidate.target}", "env": response["env"]},
                                      deadline)
                verdict = judge_axioms_response(axioms, candidate.target, self.allowed,
                                                response.get("messages", []))
            if verdict.status == "error":
                proc.kill()  # a protocol error leaves the process in a state we do not know
        except ReplFault as exc:
            proc.kill()
            if isinstance(exc, ReplTimeout):
                reason = f"no answer within verify.timeout_s = {self.config.timeout_s:g} s (REPL killed)"
            else:
                reason = str(exc)
            verdict = Verdict(exc.kind, reason)
        verdict.time_s = round(time.monotonic() - start, 4)
        proc.proofs_done += 1
        if proc.alive and proc.proofs_done >= self.config.max_proofs_per_process:
            proc.kill()  # recycle: the next proof starts a fresh process
        return verdict

    def _header_env(self, proc: ReplProcess, header: str) -> int:
        if not proc.alive:
            proc.kill()  # reap a process that died between proofs
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
            proc.kill()
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
