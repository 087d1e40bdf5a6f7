"""The wrapper `LocalTransport` runs the REPL under: it kills the REPL when `prover` goes away.

    python -I -S repl_watchdog.py WATCH_FD -- lake env repl

Run as a script with the standard library only (no site, no `prover_cli` import), so it starts in
a few milliseconds. It forks the REPL command, with the REPL's stdin/stdout/stderr, into a process
group of its own (`lake env repl` -> `repl` stay in it), and is the *subreaper* of everything the
REPL starts, so it can reap all of it. Then:

- a thread blocks reading WATCH_FD, the read end of a pipe whose only write end `prover` holds.
  EOF there means `prover` is gone (exited, crashed, SIGKILLed): it SIGKILLs the REPL's group;
- the REPL child also gets `PR_SET_PDEATHSIG = SIGKILL` (Linux), for the case where this wrapper
  alone is killed; since that reaches the command (`lake`) but not what it started (`repl`), a
  forked *sentinel* holds a pipe whose only write end this wrapper holds, and SIGKILLs the REPL's
  group when it reads EOF: when the wrapper is gone, killed or not;
- the main thread waits for the REPL, SIGKILLs what is left of its group, reaps every descendant
  and exits with the REPL's exit code, or with 128 + N after writing `repl_watchdog: killed by
  signal N` to stderr when a signal killed it (the OOM killer's SIGKILL, a `kill -9` from
  outside, or `prover`'s own kill), so the pool can tell a killed REPL from one that failed by
  itself. When this wrapper has exited, no process of the REPL's is left.

The command is normally the box around the REPL (`bwrap … -- lake env repl`, box.py): the REPL
group's kill reaches bwrap, whose `--die-with-parent` kills the box's init and with it the box's
pid namespace, so the reaping below still ends with nothing of the REPL left.

Its own stderr lines start with `repl_watchdog: ` (the transport leaves them out of what it shows
as the REPL's stderr): `repl_watchdog: started PID` (PID is also the REPL's process group) once the
command runs, `repl_watchdog: cannot start: …` (exit 127) when it cannot be started.
"""

import os
import sys


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
SIGKILL = 9


def main(argv):
    if len(argv) < 3 or argv[1] != "--":
        os.write(2, b"repl_watchdog: cannot start: usage: repl_watchdog.py WATCH_FD -- COMMAND...\n")
        return 127
    watch_fd = int(argv[0])
    command = argv[2:]
    os.set_inheritable(watch_fd, False)
    prctl = None
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            prctl = None
    if prctl is not None:
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    error_r, error_w = os.pipe()   # close-on-exec: EOF without data means the exec worked
    pid = os.fork()
    if pid == 0:
        try:
            os.close(error_r)
            os.setpgid(0, 0)
            if prctl is not None:
                prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
            os.execvp(command[0], command)
        except OSError as exc:
            os.write(error_w, (exc.strerror or str(exc)).encode("utf-8", "replace"))
        finally:
            os._exit(127)
    try:
        os.setpgid(pid, pid)   # also here: whichever of the two runs first, the group exists
    except OSError:
        pass
    os.close(error_w)
    failure = b""
    while True:
        chunk = os.read(error_r, 4096)
        if not chunk:
            break
        failure += chunk
    os.close(error_r)
    if failure:
        os.waitpid(pid, 0)
        os.write(2, b"repl_watchdog: cannot start: " + failure + b"\n")
        return 127
    # Hold no end of the REPL's pipes: EOF on them must mean the REPL is gone.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    os.write(2, ("repl_watchdog: started %d\n" % pid).encode())

    def kill_group():
        try:
            os.killpg(pid, SIGKILL)
        except OSError:
            pass

    # The sentinel: a fork of this wrapper that outlives it just long enough to kill the REPL's
    # group when the wrapper dies, however it dies (PR_SET_PDEATHSIG reaches the REPL command,
    # not the processes it started: `lake env repl` -> `repl`).
    sentinel_r, sentinel_w = os.pipe()   # close-on-exec, and the REPL was forked before it exists
    if os.fork() == 0:
        try:
            os.close(sentinel_w)
            os.close(watch_fd)
            while os.read(sentinel_r, 1):
                pass
        except OSError:
            pass
        kill_group()   # EOF: the wrapper is gone (or done): so is the REPL's group
        os._exit(0)
    os.close(sentinel_r)

    import _thread

    def watch():
        try:
            while os.read(watch_fd, 1):
                pass
        except OSError:
            pass
        kill_group()   # prover is gone: so is the REPL

    _thread.start_new_thread(watch, ())
    _, status = os.waitpid(pid, 0)
    kill_group()       # whatever the REPL started and left behind
    os.close(sentinel_w)   # the sentinel's turn: it kills the (empty) group and exits; reaped below
    while True:        # reap it all (we are its subreaper)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries already
            continue
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        os.write(2, ("repl_watchdog: killed by signal %d\n" % number).encode())
        return 128 + number
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
