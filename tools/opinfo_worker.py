"""Worker-process protocol of the OpInfo conformance harness
(tools/opinfo_conformance.py; tools/opinfo_dynamo.py reuses Worker with its own
script and environment).

Worker side: `opinfo_conformance.py --worker` runs _worker_main, a fork server
that imports torch, lazyjit and op_db once and forks a child per task; the child
runs the task's samples (tools/opinfo_runner.py). Messages are JSON lines: tasks
on the worker's stdin, events on its stdout.
Parent side: Worker starts and talks to one such process; run_task runs one
(op, dtype) task on it, resuming after samples that crash or time out and
re-running a crash in a fresh process to confirm it.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

from opinfo_compare import _first_line
from opinfo_report import group_key
from opinfo_runner import _run_task

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The script Worker runs with --worker (its main() calls _worker_main).
CONFORMANCE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "opinfo_conformance.py")


# --------------------------------------------------------------------------
# Worker side (runs in a subprocess; imports torch and lazyjit)
# --------------------------------------------------------------------------

def _worker_main():
    # The protocol uses the original stdout; anything else written to fd 1
    # (C++ prints, warnings) goes to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)

    import warnings
    warnings.simplefilter("ignore")

    import torch
    lazyjit = None
    last_err = None
    for attempt in range(4):
        try:
            import lazyjit  # noqa: F401  (registers the device)
            break
        except Exception as e:  # the library may be being rebuilt
            last_err = e
            time.sleep(30)
    if lazyjit is None:
        proto.write(json.dumps({"ev": "fatal", "reason": f"import lazyjit: {last_err!r}"}) + "\n")
        return
    torch.set_num_threads(1)
    from torch.testing._internal.common_methods_invocations import op_db

    def send(**kw):
        proto.write(json.dumps(kw) + "\n")
        proto.flush()

    send(ev="ready")
    # This process is a fork server: it never touches the lazyjit device
    # itself; every task runs in a forked child (cheap, and the imports are
    # already done), so a child that crashes or is killed for a timeout costs
    # only a new fork.
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        task = json.loads(line)
        if task.get("cmd") == "exit":
            break
        op = op_db[task["op_index"]]
        dtype = getattr(torch, task["dtype"])
        gate_r, gate_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            rc = 0
            try:
                os.close(gate_w)
                os.read(gate_r, 1)  # wait until the server has announced us
                _run_task(torch, lazyjit, op, dtype, task, send)
                send(ev="done")
            except BaseException as e:  # a harness bug, not a sample result
                try:
                    send(ev="gen_error", reason=f"harness: {_first_line(e)}")
                except BaseException:
                    pass
                rc = 3
            finally:
                try:
                    proto.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(rc)
        os.close(gate_r)
        send(ev="child", pid=pid)
        os.write(gate_w, b"x")
        os.close(gate_w)
        _, status = os.waitpid(pid, 0)
        send(ev="exit", rc=os.waitstatus_to_exitcode(status))


# --------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------

class Worker:
    """A fork-server worker process speaking JSON lines (tools/opinfo_dynamo.py
    reuses it with its own script and environment)."""
    script = CONFORMANCE_SCRIPT
    extra_env: dict = {}

    def __init__(self, slot, logdir):
        self.slot = slot
        self.logdir = logdir
        self.proc = None
        self.buf = b""
        self.nstarted = 0

    def start(self):
        self.nstarted += 1
        self.log_path = os.path.join(self.logdir, f"worker{self.slot}_{self.nstarted}.log")
        self.log = open(self.log_path, "wb")
        env = dict(os.environ)
        env.setdefault("LAZYJIT_NUM_THREADS", "1")
        env.setdefault("OMP_NUM_THREADS", "1")
        for k, v in self.extra_env.items():
            env.setdefault(k, v)
        pypath = os.path.join(REPO, "python")
        env["PYTHONPATH"] = pypath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, self.script, "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, cwd=REPO, start_new_session=True)
        self.buf = b""
        msg = self.read(timeout=240)
        if msg is None or msg.get("ev") != "ready":
            self.kill()
            raise RuntimeError(f"worker failed to start: {msg} {self.stderr_tail()}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def send(self, obj):
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def read(self, timeout):
        """Next protocol message; None on timeout; {'ev': 'died'} if the worker exited."""
        deadline = time.time() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], min(left, 1.0))
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.proc.wait()
                    return {"ev": "died", "rc": self.proc.returncode}
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return {"ev": "junk", "line": line[:200].decode(errors="replace")}

    def stderr_tail(self):
        try:
            self.log.flush()
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - 4000))
                lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
            return lines[-1].strip()[:200] if lines else ""
        except Exception:
            return ""

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except Exception:
                self.proc.kill()
            self.proc.wait()
        try:
            self.log.close()
        except Exception:
            pass

    def stop(self):
        if self.alive():
            try:
                self.send({"cmd": "exit"})
                self.proc.wait(timeout=10)
            except Exception:
                pass
        self.kill()


def _death_reason(rc):
    if rc is None:
        return "worker died"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"worker exited with code {rc}"


def run_task(worker, task, timeout, retry_crash=True):
    """Runs one (op, dtype) task, resuming after samples that crash or time
    out. Returns (records by sample index, generation error or None)."""
    records = {}
    descs = {}
    confirmed = set()  # crash reasons (grouped) already reproduced in a fresh process
    gen_error = None
    start = 0
    only = task.get("only")
    while True:
        if not worker.alive():
            worker.start()
        worker.send(dict(task, start=start))
        current = None   # sample running
        post = None      # sample whose after-failure device check is running
        child = None
        done = False
        resume = None    # index to resume from after a timeout / crash / taint
        timed_out = False
        rc = None
        while True:
            busy = current is not None or post is not None
            msg = worker.read(timeout=timeout if busy else max(timeout, 300))
            if msg is None:  # timeout
                if child is None:
                    worker.kill()
                    return records, "fork server hung"
                try:
                    os.kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                timed_out = True
                if current is not None:
                    records[current] = {"status": "timeout", "reason": f"timeout (> {timeout:g} s)",
                                        "desc": descs.get(current, "")}
                    resume = current + 1
                elif post is not None:
                    first = records[post]
                    records[post] = {"status": "timeout", "desc": first.get("desc", ""),
                                     "reason": "timeout in the next lazyjit use after the sample failed"
                                               f" ({first.get('reason')})",
                                     "after": first.get("reason")}
                    resume = post + 1
                else:
                    gen_error = f"timeout (> {max(timeout, 300):g} s) while generating samples"
                current = post = None
                continue  # wait for the server's "exit"
            ev = msg.get("ev")
            if ev == "child":
                child = msg["pid"]
            elif ev == "start":
                current = msg["i"]
                descs[current] = msg.get("desc", "")
                post = None
            elif ev == "result":
                i = msg.pop("i")
                msg.pop("ev")
                records[i] = msg
                current = None
            elif ev == "check":
                post = msg["i"]
            elif ev == "checked":
                post = None
                if not msg.get("ok"):
                    records[msg["i"]]["device_broken_after"] = True
            elif ev == "tainted":
                resume = msg["i"] + 1
            elif ev == "gen_error":
                gen_error = msg.get("reason")
            elif ev == "done":
                done = True
            elif ev == "exit":
                rc = msg["rc"]
                break
            elif ev in ("died", "junk"):  # the fork server itself died
                rc = -signal.SIGKILL if ev == "junk" else msg.get("rc")
                worker.kill()
                break
            elif ev == "fatal":
                raise RuntimeError(msg.get("reason"))
        if rc not in (0, None) and not timed_out:
            reason = f"crash: {_death_reason(rc)}"
            tail = worker.stderr_tail()
            if current is None and post is None:
                return records, f"{reason} while generating samples; {tail}"
            if current is None:
                # The sample failed cleanly, then the next use of the device
                # (a tiny known-good computation) killed the process: in a
                # user's program that sample crashes the process.
                first = records[post]
                current = post
                rec = {"status": "crash", "desc": first.get("desc", ""), "stderr": tail,
                       "reason": f"{reason} in the next lazyjit use after the sample failed"
                                 f" ({first.get('reason')})",
                       "after": first.get("reason")}
            else:
                rec = {"status": "crash", "reason": reason, "stderr": tail,
                       "desc": descs.get(current, "")}
            gk = group_key(rec["reason"])
            if retry_crash and gk not in confirmed:
                # Confirm in a fresh process: a crash that does not reproduce
                # is recorded with the re-run's result and flagged. Once a
                # crash reproduces, later samples of the op crashing the
                # same way are taken as they are.
                sub, _ = run_task(worker, dict(task, only=current, limit=current + 1), timeout,
                                  retry_crash=False)
                again = sub.get(current)
                if again is not None and again["status"] != "crash":
                    again["flaky_crash"] = reason
                    rec = again
                else:
                    confirmed.add(gk)
            records[current] = rec
            resume = current + 1
        if only is not None or done or resume is None:
            if not done and resume is None and gen_error is None and rc == 0:
                gen_error = "worker stopped before the end of the samples (harness)"
            return records, gen_error
        start = resume
