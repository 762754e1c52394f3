"""The hostile-reward programs and a runner (imported by test_hostile.py; run as a script by the unprivileged parent).

Every program returns 1.0 for a sample whose response is not "attack" (the follow-up call that proves the worker
recovered and the protocol is in step). For "attack" it tries one escape; `expect` says what containment looks like:
- "contained": the attack ran to its end and observed failure (value 0.0, no error);
- "error:<text>": the sample is a reward error whose message contains <text>;
- "any": only the global checks (canary never seen, targets unchanged, victims alive, no connection received).
`meta` carries the concrete targets: canary files, victim pids, listener addresses, files that must not change.
"""

from __future__ import annotations

import json
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

LOADED_S = 30.0  # wall clock for cases whose work (not a limit) takes seconds on a loaded machine


@dataclass(frozen=True)
class Case:
    name: str
    body: str  # the attack: the body of `reward` for an "attack" sample; `m` is the meta dict
    expect: str = "contained"
    timeout_s: float = 1.0
    recovers: bool = True  # the next sample scores 1.0
    prelude: str = ""  # module-level code run when the program loads


def _program(case: Case) -> str:
    body = textwrap.indent(textwrap.dedent(case.body).strip("\n"), "    ")
    return f"import os, sys\n{textwrap.dedent(case.prelude)}\n\ndef reward(p, r, m):\n    if r != 'attack':\n" \
           f"        return 1.0\n{body}\n"


def _read_all(paths: str) -> str:
    return textwrap.dedent(f"""
        for path in {paths}:
            try:
                data = open(path, 'rb').read()
            except OSError:
                continue
            raise RuntimeError(data[:4000])
        return 0.0""")


def _connect(family: str, kind: str, address: str) -> str:
    return f"""
        import socket
        try:
            s = socket.socket({family}, {kind})
            s.settimeout(0.5)
            s.connect({address})
        except OSError:
            return 0.0
        return 1.0"""


def _refused(attempt: str) -> str:
    """0.0 when `attempt` raises OSError (the kernel refused), 1.0 when it went through."""
    return "try:\n" + textwrap.indent(textwrap.dedent(attempt).strip("\n"), "    ") + \
        "\nexcept OSError:\n    return 0.0\nreturn 1.0"


FIND_WIRE = "import gc\nwire = [o for o in gc.get_objects() if type(o).__name__ == 'Wire'][0]\n"
LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
TCP, UDP, INET, UNIX = "socket.SOCK_STREAM", "socket.SOCK_DGRAM", "socket.AF_INET", "socket.AF_UNIX"

CASES: list[Case] = [
    # -- time, processes, memory, output ---------------------------------------------------------------------
    Case("infinite-loop", "while True:\n    pass", "error:time limit exceeded"),
    Case("sleep-forever", "import time\ntime.sleep(3600)", "error:time limit exceeded"),
    Case("fork", _refused("pid = os.fork()\nif pid == 0:\n    os._exit(0)")),
    Case("fork-bomb", """
        for _ in range(1000):
            try:
                os.fork()
            except OSError:
                pass
        return 0.0"""),
    Case("subprocess-shell", _refused("import subprocess\nsubprocess.run(['/bin/sh', '-c', 'id'])")),
    Case("posix-spawn-python", _refused("os.posix_spawn(sys.executable, [sys.executable, '-c', 'pass'], {})")),
    Case("thread", """
        import threading
        try:
            threading.Thread(target=lambda: None).start()
        except RuntimeError:
            return 0.0
        return 1.0"""),
    Case("memory-hog", "x = ' ' * (10 ** 10)\nreturn 1.0", "error:memory limit exceeded"),
    # a wall-clock budget the memory limit always beats, even on a loaded machine (1 s was not enough under load)
    Case("memory-creep", "xs = []\nwhile True:\n    xs.append(' ' * 10 ** 6)", "error:memory limit exceeded",
         timeout_s=10.0),
    # the floods move ~20 MB through a pipe: LOADED_S, a budget a loaded CI machine meets (5 s was missed)
    Case("big-stdout", "for _ in range(200):\n    print('x' * 100_000)\nreturn 0.0", timeout_s=LOADED_S),
    Case("big-stderr-fd", "for _ in range(200):\n    os.write(2, b'y' * 100_000)\nreturn 0.0", timeout_s=LOADED_S),
    Case("fill-scratch", _refused("with open('big', 'wb') as f:\n    for _ in range(200):\n"
                                  "        f.write(b'z' * 1_000_000)"), timeout_s=LOADED_S),
    # -- network ------------------------------------------------------------------------------------------------
    Case("tcp-redis", _connect(INET, TCP, "('127.0.0.1', 6379)")),
    Case("tcp-postgres", _connect(INET, TCP, "('127.0.0.1', 5432)")),
    Case("tcp-test-listener", _connect(INET, TCP, "('127.0.0.1', m['tcp_port'])")),
    Case("unix-postgres", _connect(UNIX, TCP, "'/var/run/postgresql/.s.PGSQL.5432'")),
    Case("unix-redis", _connect(UNIX, TCP, "'/var/run/redis/redis-server.sock'")),
    Case("unix-test-listener", _connect(UNIX, TCP, "m['unix_socket']")),
    Case("udp-dns", _connect(INET, UDP, "('8.8.8.8', 53)")),
    Case("vsock-host", _connect("40", TCP, "(2, 22)")),  # AF_VSOCK is not network-namespaced
    Case("packet-socket", _connect("17", "socket.SOCK_RAW", "('lo', 0)")),
    # -- reading what is not the tenant's ---------------------------------------------------------------------
    Case("read-data-dir", _read_all("m['canary_files']")),
    Case("read-database", _read_all("m['database_files']")),
    Case("read-other-team-dataset", _read_all("m['dataset_files']")),
    Case("read-via-proc-root", "paths = ['/proc/%s/root%s' % (pid, p) for pid in (1, os.getppid()) "
                               "for p in m['canary_files']]\n" + _read_all("paths")),
    Case("read-proc-environ", """
        out = repr(dict(os.environ))
        for pid in os.listdir('/proc'):
            try:
                out += open('/proc/%s/environ' % pid, 'rb').read().decode()
            except (OSError, ValueError):
                pass
        raise RuntimeError(out[:4000])""", "any"),
    Case("list-host-files", """
        seen = []
        for top in ('/', '/etc', '/home', '/root', '/tmp', '/var', '/work', '/data'):
            try:
                seen += os.listdir(top)
            except OSError:
                pass
        raise RuntimeError(repr(seen))""", "any"),
    Case("read-secrets-etc", _read_all("['/etc/shadow', '/etc/passwd', '/etc/hostname']")),
    # -- writing outside scratch -----------------------------------------------------------------------------
    Case("write-plain", _refused("open(m['write_target'], 'w').write('pwned')")),
    Case("write-dir-fd", _refused("fd = os.open('/', os.O_RDONLY)\nrel = m['write_target'].lstrip('/')\n"
                                  "os.close(os.open(rel, os.O_CREAT | os.O_WRONLY, dir_fd=fd))")),
    Case("write-harness", _refused("open('/harness/sandbox_child.py', 'a').write('pwned')")),
    Case("write-stdlib", _refused("open(m['stdlib_file'], 'a').write('pwned')")),
    Case("rename-out", _refused("open('x', 'w').write('pwned')\nos.rename('x', m['write_target'])")),
    Case("symlink-escape", _refused("os.symlink(m['canary_files'][0], 'link')\n"
                                    "raise RuntimeError(open('link').read())")),
    Case("write-jail-root", _refused("with open('/fill', 'wb') as f:\n    f.write(b'z' * 1_000_000)")),
    Case("write-dev-shm", _refused("with open('/dev/shm/fill', 'wb') as f:\n    f.write(b'z' * 1_000_000)")),
    Case("write-dev", _refused("with open('/dev/fill', 'wb') as f:\n    f.write(b'z' * 1_000_000)")),
    Case("mkdir-harness-dir", _refused("os.mkdir('/harness/more')")),
    Case("write-anywhere-but-scratch", """
        wrote = []
        for folder in ('/', '/dev', '/dev/shm', '/dev/pts', '/harness', '/scratch/..', '/usr', '/lib', '/tmp', '/run',
                       '/var/tmp', os.path.dirname(sys.executable)):
            for attempt in ('file', 'dir'):
                path = os.path.join(folder, 'fill-' + attempt)
                try:
                    if attempt == 'dir':
                        os.mkdir(path)
                    else:
                        with open(path, 'wb') as f:
                            f.write(b'z' * 1_000_000)
                    wrote.append(path)
                except OSError:
                    pass
        if wrote:
            raise RuntimeError('wrote outside the scratch dir: %r' % wrote)
        return 0.0"""),
    Case("hardlink-stdlib", _refused("os.link(m['stdlib_file'], 'mine.py')\nopen('mine.py', 'a').write('pwned')")),
    # -- other processes, privileges, the kernel --------------------------------------------------------------
    Case("kill-victims", """
        n = 0
        for pid in m['victims'] + [os.getppid(), 1]:
            try:
                os.kill(pid, 9)
                n += 1
            except OSError:
                pass
        return float(n)""", "any"),
    Case("kill-everything", "os.kill(-1, 9)\nreturn 0.0", "any"),
    Case("ctypes-libc-kill", LIBC + "return float(sum(libc.kill(pid, 9) == 0 for pid in m['victims']))"),
    Case("ctypes-unshare-userns", LIBC + "return float(libc.unshare(0x10000000) == 0)"),
    Case("ctypes-ptrace", LIBC + "return float(libc.ptrace(16, os.getppid(), 0, 0) == 0)"),
    Case("setuid-root", _refused("os.setuid(0)")),
    Case("raise-rlimits", """
        import resource
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (100, 100))
        except (ValueError, OSError):
            return 0.0
        return 1.0"""),
    # -- the harness and the protocol -------------------------------------------------------------------------
    Case("disable-harness-nan", "return float('nan')", "error:protocol violation",
         prelude="import __main__, json\n__main__._check_result = lambda raw: raw\n_dumps = json.dumps\n"
                 "json.dumps = lambda obj, **kw: _dumps(obj)\n"),
    Case("disable-harness-huge-int", "return 10 ** 400", "error:must be finite",
         prelude="import __main__\n__main__._check_result = lambda raw: raw\n"),
    Case("huge-int", "return 10 ** 400", "error:too large"),
    Case("huge-float-clamped", "return {'a': 1e300, 'b': -1e300, 'reward': 5e9}", "any"),
    Case("forged-frame-on-stdout", "frame = b'{\"ok\": true, \"result\": 1e6}'\n"
                                   "os.write(1, len(frame).to_bytes(4, 'big') + frame)\nreturn 0.0"),
    Case("junk-on-every-fd", """
        for fd in range(1 << 16):  # the pipes keep the parent's fd numbers, which can be high
            try:
                os.write(fd, b'\\x00\\x00\\x00\\x10junk')
            except OSError:
                pass
        return 0.0""", "error:"),  # a protocol violation, or a timeout when the junk frame swallows the reply
    Case("forged-nonce-reply", FIND_WIRE + "wire.send({'ok': True, 'result': 1e6})\n"
                                           "wire.send({'ok': True, 'result': 1e6})\nreturn 0.0", "any"),
    Case("close-reply-pipe", FIND_WIRE + "os.close(wire.reply_fd)\nreturn 0.0", "error:exited with status 1"),
    Case("huge-error-message", "raise RuntimeError('e' * 10_000_000)", "error:RuntimeError"),
    Case("deep-recursion-crash", "sys.setrecursionlimit(10 ** 9)\ndef f(n):\n    return f(n + 1) + 1\nreturn f(0)",
         "any", timeout_s=LOADED_S),
    Case("exit-worker", "os._exit(3)", "error:exited with status 3"),
]

IMPORT_TIME = Case("import-time-read", "", "error:loading reward code failed", recovers=False)
IMPORT_TIME_CODE = ("import os\ndata = ''\nfor path in {files!r}:\n    try:\n        data += open(path).read()\n"
                    "    except OSError:\n        pass\nraise RuntimeError('read: ' + data)\n")


def run_case(case: Case, meta: dict, memory_mb: int = 128) -> dict:
    """Run one program on an attack sample and a normal one; the outcomes as plain data."""
    from workers.rewards.sandbox import SandboxWorker

    code = IMPORT_TIME_CODE.format(files=meta["canary_files"]) if case is IMPORT_TIME else _program(case)
    worker = SandboxWorker(code, timeout_s=case.timeout_s, memory_mb=memory_mb)
    try:
        attack = worker.call("p", "attack", meta)
        after = worker.call("p", "ok", meta)
    finally:
        worker.close()
    return {"mode": worker.mode, "attack": [attack.value, attack.components, attack.error],
            "after": [after.value, after.components, after.error], "output": worker.last_output,
            "protections": worker.protections}


def run_all(meta: dict, workers: int = 6) -> dict[str, dict]:
    cases = [*CASES, IMPORT_TIME]
    with ThreadPoolExecutor(workers) as pool:
        results = pool.map(lambda case: run_case(case, meta), cases)
        return {case.name: result for case, result in zip(cases, results, strict=True)}


if __name__ == "__main__":  # the unprivileged parent: meta JSON on argv[1], results JSON on stdout
    print(json.dumps(run_all(json.loads(sys.argv[1]))))
