"""Redis replies whose headers claim more than any call can take (issue 48,
defect 6). `*2147483647` made hiredis's reader allocate 2^31 array slots and
walk them at the timeout: a first sync with LAZYJIT_REMOTE_TIMEOUT_MS=100
stalled for 15-18 s, and `lazyjit-cache remote ls` took ~10 s against its 2 s
timeout. Now each such reply is a protocol error at once: counted, a miss,
the connection dropped; the program computes what eager does.

The server here is a fake on a loopback port that answers every command with
one hostile reply (the pattern of test_remote_cache.py's DribblingServer).
"""
import socket
import threading
import time

import pytest

from test_remote_cache import SECRET, TOOL, finish, start, tool

HOSTILE = {
    "array_2g": b"*2147483647\r\n",
    "array_4g": b"*4294967297\r\n",
    "bulk_int64_max": b"$9223372036854775807\r\n",
    "negative_array": b"*-5\r\n",
    "nested_arrays": b"*1\r\n" * 100000,
    "endless_status_line": b"+" + b"K" * 300000,
}


class HostileServer:
    """Answers each connection's first command with `reply`, then reads until
    the client hangs up."""

    def __init__(self, reply):
        self.reply = reply
        self.stop = threading.Event()
        self.connections = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.05)
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn):
        conn.settimeout(0.05)
        answered = False
        try:
            while not self.stop.is_set():
                try:
                    data = conn.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    return  # the client hung up
                if not answered:
                    answered = True
                    conn.sendall(self.reply)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.listener.close()
        for t in self.threads:
            t.join(timeout=5)


@pytest.fixture(params=sorted(HOSTILE))
def hostile(request):
    server = HostileServer(HOSTILE[request.param])
    yield server
    server.close()


def test_first_sync_is_not_stalled_by_a_huge_header(tmp_path, hostile):
    p = start(tmp_path / "a", hostile.url, widths=(16, 24), LAZYJIT_REMOTE_TIMEOUT_MS=100)
    try:
        r, err = finish(p, timeout=120)  # checks each result against eager
    except BaseException:
        p.kill()
        raise
    assert r["remote_hits"] == 0 and r["remote_writes"] == 0, r
    assert r["remote_by_kind"].get("protocol", 0) >= 1, (r, err)
    assert "protocol" in err, err  # said once on stderr
    # Two lookups and two write-backs against a 100 ms timeout: before, 15 s.
    assert r["remote_ms"] < 2000, r


@pytest.mark.parametrize("command", ["ls", "pull"])
def test_cache_tool_remote_obeys_its_timeout(tmp_path, hostile, command):
    t0 = time.time()
    p = tool("remote", command, "--remote", hostile.url, "--timeout-ms", "2000", "--dir", str(tmp_path / "c"),
             env_extra={"LAZYJIT_CACHE_SECRET": SECRET}, check=False)
    took = time.time() - t0
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "SCAN on " + hostile.url in p.stderr and "not a reply this client takes" in p.stderr, p.stderr
    assert took < 3, f"{took:.1f} s against a 2 s timeout"
