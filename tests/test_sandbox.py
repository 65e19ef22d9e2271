"""Chapter 3's sandbox, attacked: each attempt fails for a reason the operating system gives,
and no run leaves anything behind.

Every run goes through `run`, which checks afterwards that no process of the run is left on
the host and that the parent's limits, environment and open files are as they were. A run
costs a few hundredths of a second; the limits' tests are kept to about a second each. Where
bubblewrap or user namespaces are missing, the tests that need a sandbox skip with the reason,
and the tests of the refusal and of the filter's program run everywhere.
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import socket
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentbook.untrusted as untrusted
from agentbook import SandboxLimits, run_sandboxed, sandbox_problem, sandboxed_python_tool

PROBLEM = sandbox_problem()
needs_sandbox = pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox here: {PROBLEM}")
REPO_ROOT = Path(__file__).resolve().parent.parent
EPERM = r"PermissionError: \[Errno 1\] Operation not permitted"
# A system call through ctypes, as code that bypasses Python's own functions would make it;
# the program prints the error number the kernel answered.
LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
ERRNO = "print('errno', ctypes.get_errno() if result == -1 else 0)"
NUMBERS = untrusted._SYSCALLS.get(platform.machine(), (0, {}))[1]


def parent_state() -> tuple[object, ...]:
    """What a run must leave as it was: the parent's limits, environment, descriptors, folder
    and signal handlers."""
    import resource  # here: Windows has none, and there only the refusal is tested
    import signal

    limits = {name: resource.getrlimit(getattr(resource, name))
              for name in dir(resource) if name.startswith("RLIMIT_")}
    handlers = {number: signal.getsignal(number) for number in signal.valid_signals()}
    return (limits, dict(os.environ), sorted(os.listdir("/proc/self/fd")), os.getcwd(),
            handlers)


def processes_marked(mark: int) -> list[str]:
    """Host processes whose command line holds `mark`: a run's bubblewrap, its namespace's
    first process and the interpreter all carry the run's scratch size as an argument."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # not a process, or one that just ended
            continue
        if str(mark).encode() in arguments:
            found.append(entry.name)
    return found


def run(code: str, **limits: Any) -> dict[str, str]:
    """Run `code` in the sandbox, then check that the run left nothing: no process of its
    own on the host, and the parent's limits, environment, open files, folder and signal
    handlers unchanged."""
    mark = 16 * 2**20 + secrets.randbelow(2**20)  # this run's scratch size, its mark
    chosen = SandboxLimits(**{"scratch_bytes": mark, **limits})
    before = parent_state()
    seen: dict[str, str] = run_sandboxed(code, chosen)
    assert processes_marked(mark) == [], "a process of the run outlived it"
    assert parent_state() == before, "the run changed the parent"
    return seen


# ---------------------------------------------------------------------------------------------
# The attempts, each refused by the kernel. `{pid}` is the parent's process ID, `{cwd}` its
# folder, `{repo}` this repository and `{home}` its user's home folder, as an attacker who
# guessed them would write them.

ESCAPES = {
    # The file system: nothing of the host's but the interpreter, and that read-only.
    "read a secret": ("open('/etc/shadow').read()", "FileNotFoundError"),
    "read the user's key": ("open('{home}/.ssh/id_rsa').read()", "FileNotFoundError"),
    "list the parent's folder": ("import os; os.listdir('{cwd}')", "FileNotFoundError"),
    "stat the repository": ("import os; os.stat('{repo}/README.md')", "FileNotFoundError"),
    "readlink the parent's cwd": ("import os; os.readlink('/proc/1/cwd')", "FileNotFoundError"),
    "read /proc": ("open('/proc/self/status').read()", "FileNotFoundError"),
    "write a sysctl": ("open('/proc/sys/vm/drop_caches', 'w').write('3')", "FileNotFoundError"),
    "read /sys": ("open('/sys/kernel/uevent_seqnum').read()", "FileNotFoundError"),
    "write into the interpreter": ("import os; open(os.__file__, 'a')", "Read-only file system"),
    "write a file at the root": ("open('/planted', 'w')", "Read-only file system"),
    "rename out of scratch": ("import os; open('x', 'w').close(); os.rename('x', '/x')",
                              "Invalid cross-device link"),
    "rename into the library": ("import os; open('x', 'w').close()\n"
                                "os.rename('x', os.path.dirname(os.__file__) + '/x.py')",
                                "Invalid cross-device link"),
    "hard-link the library": ("import os; os.link(os.__file__, 'x')",
                              "Invalid cross-device link"),
    "write through a symlink": ("import os; os.symlink(os.__file__, 'x'); open('x', 'a')",
                                "Read-only file system"),
    "mkfifo outside scratch": ("import os; os.mkfifo('/fifo')", "Read-only file system"),
    "shm_open": ("import _posixshmem, os\n"
                 "_posixshmem.shm_open('/probe', os.O_CREAT | os.O_RDWR, 0o600)",
                 "Read-only file system"),
    "setxattr outside scratch": ("import os; os.setxattr(os.__file__, 'user.x', b'1')", EPERM),
    # The network: a namespace with only a loopback device, and sockets of one family, Unix's.
    "open a socket": ("import socket\nsocket.create_connection(('192.0.2.1', 80), timeout=2)",
                      "Address family not supported by protocol"),
    "resolve a name": ("import socket; socket.getaddrinfo('example.com', 80)", "gaierror"),
    # vsock has no network namespace: on a virtual machine it reaches the hypervisor's services.
    "a vsock socket": ("import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)",
                       "Address family not supported by protocol"),
    "a netlink socket": ("import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)",
                         "Address family not supported by protocol"),
    # Processes: the filter refuses every way to start one.
    "start a shell": ("import subprocess; subprocess.run(['/bin/sh', '-c', 'id'])", EPERM),
    "fork": ("import os; os.fork()", EPERM),
    "fork bomb": ("import os\nwhile True:\n    os.fork()", EPERM),
    # glibc's posix_spawn falls back from clone3 to clone and reports that refusal as EINVAL.
    "posix_spawn": ("import os, sys; os.posix_spawn(sys.executable, [sys.executable], os.environ)",
                    r"(Permission|OS)Error: \[Errno (1|22)\]"),
    "an extension module under a dotted name": (
        "import importlib.util, subprocess, _posixsubprocess\n"
        "spec = importlib.util.spec_from_file_location('x._posixsubprocess',\n"
        "                                              _posixsubprocess.__file__)\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "subprocess._fork_exec = module.fork_exec\n"
        "subprocess.Popen(['/bin/sh', '-c', 'sleep 60'])", EPERM),
    "a raw clone": (LIBC + f"result = libc.syscall({NUMBERS.get('clone')}, 17, 0, 0, 0, 0)\n"
                    + ERRNO, "errno 1"),
    "clone3": (LIBC + "result = libc.syscall(435, 0, 0)\n" + ERRNO, "errno 1"),
    # Threads too: run as root, the process is exempt from RLIMIT_NPROC, and threads with small
    # stacks cost kernel memory and host process IDs, not address space.
    "a thread": ("import threading; threading.Thread(target=print).start()",
                 "RuntimeError: can't start new thread"),
    "threads with small stacks": (
        LIBC + "attributes = ctypes.create_string_buffer(64)\n"
        "libc.pthread_attr_init(attributes); libc.pthread_attr_setstacksize(attributes, 16384)\n"
        "started = 0\nfor _ in range(100):\n    thread = ctypes.c_ulong()\n"
        "    started += libc.pthread_create(ctypes.byref(thread), attributes,\n"
        "                                   ctypes.cast(libc.pause, ctypes.c_void_p), None) == 0\n"
        "print('started', started)", "started 0\n"),
    "exec a shell in place": ("import os; os.execv('/bin/sh', ['sh'])", "FileNotFoundError"),
    # Other processes: the parent's ID names nothing in the child's namespace.
    "signal the parent": ("import os, signal; os.kill({pid}, signal.SIGKILL)",
                          "ProcessLookupError"),
    "a pidfd on the parent": ("import os; os.pidfd_open({pid})", "ProcessLookupError"),
    "lower the parent's limits": (
        "import resource\nresource.prlimit({pid}, resource.RLIMIT_NOFILE, (12, 12))",
        "ProcessLookupError"),
    "trace the namespace's first process": (LIBC + "result = libc.ptrace(16, 1, 0, 0)\n" + ERRNO,
                                            "errno 1"),
    # The kernel's keyrings, which no namespace separates: the session keyring's ID.
    "read the session keyring": (
        LIBC + f"result = libc.syscall({NUMBERS.get('keyctl')}, 0, -3, 0)\n" + ERRNO, "errno 1"),
    "read the parent's memory": (
        LIBC + "class Span(ctypes.Structure):\n"
        "    _fields_ = [('base', ctypes.c_void_p), ('size', ctypes.c_size_t)]\n"
        "into = ctypes.create_string_buffer(8)\n"
        "local, remote = Span(ctypes.addressof(into), 8), Span(0x400000, 8)\n"
        "result = libc.process_vm_readv({pid}, ctypes.byref(local), 1,\n"
        "                              ctypes.byref(remote), 1, 0)\n"
        + ERRNO, "errno 3"),
    # Memory held outside the address-space limit, which the filter refuses.
    "System V shared memory": (LIBC + "result = libc.shmget(1, 64 << 20, 0o1600)\n" + ERRNO,
                               "errno 1"),
    "a System V message queue": (LIBC + "result = libc.msgget(1, 0o1600)\n" + ERRNO, "errno 1"),
    "a file only a descriptor names": ("import os; os.memfd_create('hoard')", EPERM),
    "System V semaphores": (LIBC + "result = libc.semget(0, 32000, 0o1600)\n" + ERRNO,
                            "errno 1"),
    "extended attributes in scratch": ("import os; open('x', 'w').close()\n"
                                       "os.setxattr('x', 'user.x', bytes(60000))", EPERM),
    "setxattrat": (LIBC + "open('x', 'w').close()\nvalue = ctypes.create_string_buffer(8)\n"
                   "spec = (ctypes.c_uint64 * 2)(ctypes.addressof(value), 8)\n"
                   "result = libc.syscall(463, -100, b'x', 0, b'user.x', spec, 16)\n" + ERRNO,
                   "errno 1"),
    # What the kernel counts for the whole host, or for the host's user: the run's share would
    # be taken from every other process (root's, where the notebook runs as root).
    "an asynchronous I/O context": (
        LIBC + "context = ctypes.c_ulong()\n"
        f"result = libc.syscall({NUMBERS.get('io_setup')}, 32768, ctypes.byref(context))\n"
        + ERRNO, "errno 1"),
    "queue signals past the limit": (
        LIBC + "timer, made = ctypes.c_void_p(), 0\n"
        "while made < 1000 and libc.timer_create(1, None, ctypes.byref(timer)) == 0:\n"
        "    made += 1\nprint('timers', made)", r"timers ([0-9]|[1-5][0-9]|6[0-4])\n"),
    "a POSIX message queue": (
        LIBC + "import os\nresult = libc.mq_open(b'/q', os.O_CREAT | os.O_RDWR, 0o600, None)\n"
        + ERRNO, "errno 24"),
    # The kernel's log, which any user may read where the host sets kernel.dmesg_restrict to 0.
    "read the kernel's log": (LIBC + "log = ctypes.create_string_buffer(4096)\n"
                              "result = libc.klogctl(3, log, 4096)\n" + ERRNO, "errno 1"),
    # Watching a file the host shares, which tells when the host's processes open it.
    "watch a host file with inotify": (
        LIBC + "result = libc.inotify_init1(0)\n" + ERRNO, "errno 1"),
    "watch a host file with fanotify": (
        LIBC + "import os; result = libc.fanotify_init(0x200, os.O_RDONLY)\n" + ERRNO, "errno 1"),
    "watch a host folder with dnotify": (  # the interpreter's folders are the host's own
        "import fcntl, os, sys\nfolder = os.open(sys.path[-1], os.O_RDONLY)\n"
        "fcntl.fcntl(folder, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MULTISHOT)", EPERM),
    # A lease on a file the host shares (its owner, where the notebook runs as root): a host
    # process that opens the file for writing waits until the lease is given up.
    "a lease on a host file": ("import fcntl, os\n"
                               "shared = os.open('/etc/ld.so.cache', os.O_RDONLY)\n"
                               "fcntl.fcntl(shared, fcntl.F_SETLEASE, fcntl.F_RDLCK)", EPERM),
    # Calls that mostly add attack surface on the kernel, refused whatever the host allows.
    "io_uring": (LIBC + "params = ctypes.create_string_buffer(120)\n"
                 "result = libc.syscall(425, 4, params)\n" + ERRNO, "errno 1"),
    "bpf": (LIBC + f"result = libc.syscall({NUMBERS.get('bpf')}, 0, 0, 0)\n" + ERRNO, "errno 1"),
    "userfaultfd": (LIBC + f"result = libc.syscall({NUMBERS.get('userfaultfd')}, 0)\n" + ERRNO,
                    "errno 1"),
    # Privileges: none to take, and limits that stay.
    "become root": ("import os; os.setuid(0)", "Invalid argument"),  # no root in its namespace
    "mount over the root": (LIBC + "result = libc.mount(b'none', b'/', b'tmpfs', 0, None)\n"
                            + ERRNO, "errno 1"),
    "make a user namespace": (LIBC + "result = libc.unshare(0x10000000)\n" + ERRNO,
                              "errno (1|28)"),
    "raise its own limits": ("import resource\n"
                             "resource.setrlimit(resource.RLIMIT_CPU, (100, 100))",
                             "ValueError: not allowed to raise maximum limit"),
    # A terminal to type into: there is none.
    "open the terminal": ("open('/dev/tty')", "No such device or address"),
    "TIOCSTI on standard input": ("import fcntl, termios; fcntl.ioctl(0, termios.TIOCSTI, b'x')",
                                  "Inappropriate ioctl for device"),
    # Standard input is the code's file in memory, opened for reading only.
    "grow the code's file": ("import os; os.write(0, b'x' * 4096)", "Bad file descriptor"),
}


@needs_sandbox
@pytest.mark.parametrize(("code", "answer"), list(ESCAPES.values()), ids=list(ESCAPES))
def test_each_attempt_fails_with_the_kernels_answer(code: str, answer: str) -> None:
    import re

    code = code.format(pid=os.getpid(), cwd=os.getcwd(), repo=REPO_ROOT,
                       home=os.path.expanduser("~"))
    seen = run(code)
    assert re.search(answer, seen["output"]), seen
    assert seen["status"] in ("failed", "completed"), seen


@needs_sandbox
def test_a_unix_socket_in_the_parents_abstract_namespace_is_out_of_reach() -> None:
    name = f"\0agentbook-probe-{secrets.token_hex(4)}"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(name)
        listening.listen()
        seen = run(f"import socket\nsocket.socket(socket.AF_UNIX).connect({name!r})")
    assert "ConnectionRefusedError" in seen["output"], seen


@needs_sandbox
def test_the_child_is_user_65534_alone_in_its_namespace_without_capabilities() -> None:
    code = (LIBC + "import os\n"
            "header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()\n"
            "libc.capget(header, data)\n"
            "open_fds = []\nfor fd in range(1024):\n    try:\n        os.fstat(fd)\n"
            "        open_fds.append(fd)\n    except OSError:\n        pass\n"
            "print(os.getuid(), os.getgid(), os.getgroups(), os.getpid(), os.getppid())\n"
            "print(os.getcwd(), dict(os.environ), list(data[:2]), open_fds)")
    seen = run(code)
    assert seen["output"] == ("65534 65534 [] 2 1\n"
                              "/scratch {'PWD': '/scratch'} [0, 0] [0, 1, 2]\n"), seen


@needs_sandbox
def test_the_namespaces_first_process_shrugs_off_a_signal_from_inside() -> None:
    seen = run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('still here')")
    assert (seen["status"], seen["output"]) == ("completed", "still here\n")


@needs_sandbox
def test_the_notebooks_packages_and_repository_are_out_of_view() -> None:
    for module in ("pytest", "agentbook", "nbformat"):
        seen = run(f"import {module}")
        assert f"ModuleNotFoundError: No module named '{module}'" in seen["output"], seen


@needs_sandbox
def test_what_the_child_leaves_in_scratch_ends_with_the_run() -> None:
    token = f"agentbook-probe-{secrets.token_hex(4)}"
    code = (f"import os\nos.mkfifo('{token}')\nopen('{token}.txt', 'w').close()\n"
            "print(sorted(os.listdir('.')))")
    seen = run(code)
    assert seen["output"] == f"['{token}', '{token}.txt']\n", seen
    for place in ("/tmp", "/dev/shm", "/scratch"):
        assert not Path(place, token).exists()


@needs_sandbox
def test_files_without_names_count_against_the_scratch_folder() -> None:
    code = ("import os\nheld, total = [], 0\ntry:\n    while True:\n"
            "        held.append(os.open('.', os.O_TMPFILE | os.O_RDWR))\n"
            "        total += os.write(held[-1], bytes(4 << 20))\n"
            "except OSError as error:\n    print(total, error.strerror)")
    total, error = run(code)["output"].split(" ", 1)
    assert 16 << 20 <= int(total) <= 17 << 20 and error == "No space left on device\n"


@needs_sandbox
def test_a_ctypes_callback_still_works_without_memfd_create() -> None:
    code = "import ctypes\nprint(ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 7)())"
    assert run(code)["output"] == "7\n"


@needs_sandbox
def test_what_the_child_still_shares_with_the_host() -> None:
    # The rows of the chapter's table that nothing here stops, shown: the child runs on the
    # host's kernel and reads what it says of the host (its release, its memory), the
    # interpreter's path and the loader's list of libraries; it holds a lock on a file the host
    # shares, and kernel memory in sockets up to its open files; and no core file, but a
    # crash would still go to the host's handler.
    code = ("import fcntl, os, resource, socket, sys\n"
            "print(os.uname().release, os.sysconf('SC_PHYS_PAGES'), sys.executable)\n"
            "print(os.path.exists('/etc/ld.so.cache'))\n"
            "fcntl.flock(os.open(os.__file__, os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "pairs = [socket.socketpair() for _ in range(30)]\n"
            "print('locked', len(pairs), resource.getrlimit(resource.RLIMIT_NOFILE),\n"
            "      resource.getrlimit(resource.RLIMIT_CORE))")
    python = untrusted._python_files()[0]
    seen = run(code)
    assert seen["output"] == (
        f"{os.uname().release} {os.sysconf('SC_PHYS_PAGES')} {python}\n"
        f"{Path('/etc/ld.so.cache').exists()}\nlocked 30 (64, 64) (0, 0)\n"), seen


# ---------------------------------------------------------------------------------------------
# The limits


@needs_sandbox
def test_the_limits_stop_sleeping_hoarding_filling_and_flooding() -> None:
    # The processor-time limit stops the chapter's endless loop; the next test catches its signal.
    sleep = run("import time; time.sleep(30)", wall_seconds=0.3)
    assert (sleep["status"], sleep["reason"]) == ("stopped", "ran longer than 0.3 s")
    hidden = run("import os, time\nos.close(1); os.close(2)\ntime.sleep(30)", wall_seconds=0.3)
    assert (hidden["status"], hidden["reason"]) == ("stopped", "ran longer than 0.3 s")
    hoard = run("b = bytearray(2**31)")
    assert (hoard["status"], hoard["output"]) == ("failed", "MemoryError\n")
    fill = run("n = 0\nwhile True:\n    open(f'f{n}', 'wb').write(bytes(2**20)); n += 1")
    assert "No space left on device" in fill["output"], fill
    big = run("open('big', 'wb').write(bytes(2**25))")
    assert "File too large" in big["output"], big
    flood = run("while True: print('x' * 99)", output_bytes=1000)
    assert (flood["status"], len(flood["output"])) == ("stopped", 1000)
    raw = run("import os\nwhile True: os.write(1, b'x' * 4096)", output_bytes=1000)
    assert (raw["status"], raw["reason"], len(raw["output"])) == (
        "stopped", "wrote more than 1000 bytes", 1000)


@needs_sandbox
def test_catching_the_processor_time_signal_only_reaches_the_hard_limit() -> None:
    code = "import signal\nsignal.signal(signal.SIGXCPU, lambda *_: None)\nwhile True: pass"
    seen = run(code, wall_seconds=60)
    assert (seen["status"], seen["reason"]) == ("stopped", "killed by SIGKILL")


@needs_sandbox
def test_the_wall_clock_ends_every_process_in_the_namespace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # With a filter that allows everything, the child can fork: killing the namespace's first
    # process must still end its children, grandchildren and threads before the run returns.
    allow_all_calls = struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000)
    monkeypatch.setattr(untrusted, "_seccomp_filter", lambda machine: allow_all_calls)
    code = ("import os, threading, time\n"
            "for _ in range(3):\n"
            "    if os.fork() == 0:\n"
            "        os.fork(); os.setsid(); time.sleep(60); os._exit(0)\n"
            "threading.Thread(target=time.sleep, args=(60,)).start()\nprint('forked', flush=True)\n"
            "time.sleep(60)")
    seen = run(code, wall_seconds=0.5)
    assert (seen["status"], seen["output"]) == ("stopped", "forked\n")


@needs_sandbox
@pytest.mark.parametrize("where", ["_namespace_init", "_read_output"])
def test_an_interrupted_run_still_ends_its_namespace(monkeypatch: pytest.MonkeyPatch,
                                                      where: str) -> None:
    # As when a reader interrupts the kernel: before the child starts, or while it runs.
    real = getattr(untrusted, where)

    def interrupted(*args: Any) -> Any:
        real(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(untrusted, where, interrupted)
    mark = 16 * 2**20 + secrets.randbelow(2**20)
    with pytest.raises(KeyboardInterrupt):
        run_sandboxed("import time\nwhile True: time.sleep(1)",
                      SandboxLimits(scratch_bytes=mark, wall_seconds=0.3))
    for _ in range(50):  # before the child started, the end is not awaited: allow a moment
        if processes_marked(mark) == []:
            break
        time.sleep(0.1)
    assert processes_marked(mark) == []


# ---------------------------------------------------------------------------------------------
# Ordinary use


@needs_sandbox
def test_ordinary_code_runs_with_the_standard_library_and_its_compiled_modules() -> None:
    code = ("import json, sqlite3, ssl, zlib, decimal, hashlib, collections\n"
            "open('a.txt', 'w').write('hi')\n"
            "with sqlite3.connect('d.db') as db:  # a file: SQLite locks it as it writes\n"
            "    db.execute('create table t (x)'); db.execute('insert into t values (42)')\n"
            "print(sorted(__import__('os').listdir('.')), json.dumps({'x': 1}),\n"
            "      sqlite3.connect('d.db').execute('select x from t').fetchone()[0],\n"
            "      zlib.decompress(zlib.compress(b'ab' * 9)), decimal.Decimal('0.1') * 3)")
    seen = run(code)
    assert seen == {"status": "completed", "reason": "exited normally",
                    "output": "['a.txt', 'd.db'] {\"x\": 1} 42 b'ababababababababab' 0.3\n"}


@needs_sandbox
def test_two_runs_at_once_each_get_their_own_scratch_folder() -> None:
    from concurrent.futures import ThreadPoolExecutor

    def one(word: str) -> str:
        code = (f"open('shared.txt', 'w').write({word!r})\nimport time; time.sleep(0.2)\n"
                "print(open('shared.txt').read())")
        seen: dict[str, str] = run_sandboxed(code, SandboxLimits())
        return seen["output"]

    with ThreadPoolExecutor(max_workers=2) as pool:
        assert list(pool.map(one, ["first", "second"])) == ["first\n", "second\n"]


@needs_sandbox
def test_the_tool_is_a_read_with_one_string_argument_and_checked_limits() -> None:
    tool = sandboxed_python_tool(cpu_seconds=2)
    assert (tool.schema, tool.effectful) == ({"code": str}, False)
    assert tool.handler(code="print(6 * 7)")["output"] == "42\n"
    for bad in ({"memory_bytes": 0}, {"cpu_seconds": 1.5}, {"output_bytes": "9"},
                {"scratch_bytes": -1}, {"wall_seconds": float("nan")}, {"cpu_seconds": True},
                {"wall_seconds": 25 * 24 * 3600.0}):  # longer than poll() can wait at once
        with pytest.raises(ValueError, match="positive"):
            sandboxed_python_tool(**bad)
    with pytest.raises(TypeError):
        sandboxed_python_tool(disk=1)


# ---------------------------------------------------------------------------------------------
# Where no sandbox can run, the tool refuses and says why; it never runs the code unconfined.


@pytest.fixture
def no_process_started(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import subprocess

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a refused sandbox started a process")

    untrusted._trial_run.cache_clear()
    monkeypatch.setattr(subprocess, "Popen", refuse)
    yield
    untrusted._trial_run.cache_clear()


@pytest.mark.parametrize(("change", "value", "says"), [
    ("platform", "emscripten", "WebAssembly's Python cannot start a process"),
    ("platform", "darwin", "it needs Linux's namespaces, and this is darwin"),
    ("platform", "win32", "it needs Linux's namespaces, and this is win32"),
    ("machine", "riscv64", "its filter knows x86_64 and aarch64, not riscv64"),
    ("bwrap", None, "bubblewrap is not installed (apt-get install bubblewrap"),
])
@pytest.mark.usefixtures("no_process_started")
def test_where_something_is_missing_the_tool_refuses_and_names_it(
        monkeypatch: pytest.MonkeyPatch, change: str, value: str | None, says: str) -> None:
    if change == "platform":
        monkeypatch.setattr(sys, "platform", value)
    elif change == "machine":
        monkeypatch.setattr(platform, "machine", lambda: value)
    else:
        monkeypatch.setattr(shutil, "which", lambda program: None)
    assert says in str(sandbox_problem())
    with pytest.raises(OSError, match="no sandbox here: "):
        sandboxed_python_tool()
    with pytest.raises(OSError, match="no sandbox here: "):
        run_sandboxed("print(1)", SandboxLimits())


def test_the_reader_notebook_runs_to_the_end_without_bubblewrap_or_the_results(
        tmp_path: Path) -> None:
    # As on Binder, Colab or a Mac: no bwrap on PATH. The notebook alone, as a download is, so
    # figures/ is not beside it, and any fetch of the results goes to a proxy that refuses.
    import nbformat
    from nbclient import NotebookClient

    folder = tmp_path / "notebooks"
    folder.mkdir()
    notebook = nbformat.read(REPO_ROOT / "notebooks" / "03_untrusted.ipynb", as_version=4)
    environment = {"PATH": os.path.dirname(sys.executable), "HOME": str(tmp_path),
                   "https_proxy": "http://127.0.0.1:9", "PYTHONHASHSEED": "0"}
    NotebookClient(notebook, timeout=60, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute(env=environment)
    printed = {cell.id: "".join(output.get("text", "") for output in cell.outputs)
               for cell in notebook.cells if cell.cell_type == "code"}
    for cell in ("escapes", "sandbox-agent"):
        assert printed[cell].startswith("This cell needs the sandbox, which cannot run here: "
                                        "bubblewrap is not installed"), printed[cell]
    assert printed["agentdojo-load"] == (
        "The banking results are not here: run python3 dev.py book.\n"
        "The slack results are not here: run python3 dev.py book.\n")
    figure = next(cell for cell in notebook.cells if cell.id == "agentdojo-figure")
    assert figure.outputs == []


@pytest.mark.skipif(sys.platform != "linux", reason="the trial run starts bubblewrap on Linux")
def test_where_bubblewrap_cannot_start_the_refusal_carries_its_complaint(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # As in a container whose kernel lets no one make a user namespace.
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which",
                        lambda program: str(fake) if program == "bwrap" else real_which(program))
    untrusted._trial_run.cache_clear()
    try:
        assert sandbox_problem() == (
            "bubblewrap (0.8 or later, with user namespaces) cannot start it here: "
            "bwrap: No permissions to create a new namespace")
        with pytest.raises(OSError, match="No permissions to create a new namespace"):
            run_sandboxed("print(1)", SandboxLimits())
    finally:
        untrusted._trial_run.cache_clear()


@needs_sandbox
def test_a_kernel_without_pidfds_is_refused_and_the_trial_leaves_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def no_pidfds(pid: int) -> int:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    mark = 16 * 2**20 + secrets.randbelow(2**20)  # the trial run's scratch size, its mark
    monkeypatch.setattr(untrusted, "SandboxLimits",
                        lambda: SandboxLimits(scratch_bytes=mark))
    monkeypatch.setattr(os, "pidfd_open", no_pidfds)
    untrusted._trial_run.cache_clear()
    try:
        assert sandbox_problem() == "it cannot start here: [Errno 38] Function not implemented"
    finally:
        untrusted._trial_run.cache_clear()
    for _ in range(50):  # the trial's bubblewrap was killed, not awaited
        if processes_marked(mark) == []:
            break
        time.sleep(0.1)
    assert processes_marked(mark) == []


# ---------------------------------------------------------------------------------------------
# The filter's program, run by a small BPF interpreter, on both machines it knows


def verdict(program: bytes, arch: int, number: int, *arguments: int) -> int:
    """What the filter answers for one system call, as the kernel would run it."""
    data = struct.pack("=iIQ6Q", number, arch, 0, *arguments, *[0] * (6 - len(arguments)))
    steps, step, value = list(struct.iter_unpack("=HBBI", program)), 0, 0
    while True:
        operation, if_true, if_false, operand = steps[step]
        if operation == 0x20:  # load a word of the call's data
            (value,), step = struct.unpack_from("=I", data, operand), step + 1
        elif operation == 0x06:  # answer
            return int(operand)
        else:
            taken = {0x15: value == operand, 0x35: value >= operand,
                     0x45: bool(value & operand)}[operation]
            step += 1 + (if_true if taken else if_false)


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_filter_refuses_processes_threads_named_calls_watches_leases_other_sockets(
        machine: str) -> None:
    arch, number = untrusted._SYSCALLS[machine]
    checked = untrusted._CHECKED_CALLS[machine]
    program = untrusted._seccomp_filter(machine)
    allow, eperm, no_family, kill = 0x7FFF0000, 0x50001, 0x50061, 0x80000000
    thread = 0x10000 | 0x100 | 0x800 | 0x200  # CLONE_THREAD | VM | SIGHAND | FS
    read = {"x86_64": 0, "aarch64": 63}[machine]
    assert verdict(program, arch, number["clone"], thread) == eperm
    assert verdict(program, arch, number["clone"], 17) == eperm  # SIGCHLD alone: a process
    assert verdict(program, arch, read) == allow
    for name in number:
        assert verdict(program, arch, number[name]) == eperm, name
    assert {"clone3", "ptrace", "keyctl", "memfd_create", "shmget", "semget", "io_setup",
            "io_uring_setup", "bpf", "inotify_init1", "fanotify_init", "setxattr",
            "fsetxattr", "setxattrat", "syslog"} <= set(number)
    for call in (checked["socket"], checked["socketpair"]):  # AF_UNIX passes, no other
        assert verdict(program, arch, call, 1) == allow
        for family in (2, 10, 16, 40):  # AF_INET, AF_INET6, AF_NETLINK, AF_VSOCK
            assert verdict(program, arch, call, family) == no_family
    notify, lease, set_flags, set_lock = 1026, 1024, 4, 6  # fcntl's F_NOTIFY, F_SETLEASE, ...
    for command, answer in ((notify, eperm), (lease, eperm), (set_flags, allow), (set_lock, allow)):
        assert verdict(program, arch, checked["fcntl"], 3, command) == answer
    assert verdict(program, 0x40000003, read) == kill  # a call through i386's interface
    if machine == "x86_64":
        assert {"fork", "vfork", "inotify_init"} <= set(number)
        assert verdict(program, arch, 0x40000000 | read) == eperm  # the x32 interface
