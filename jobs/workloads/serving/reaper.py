"""Runs a server and ends its whole process group when the worker that started it goes (run as a script:
`python reaper.py <server argv...>`, its stdin a pipe from the worker).

The kernel closes the pipe however the worker ends, SIGKILL included; on that end of file, the server and what it
started (vLLM's engine core) get SIGTERM, then SIGKILL. Exits with the server's status when the server exits first.
"""
import os
import signal
import subprocess
import sys
import threading
import time

GRACE_S = 10.0


def _exit_with(server: subprocess.Popen) -> None:
    rc = server.wait()
    os.killpg(0, signal.SIGTERM)                  # what the server left behind
    os._exit(rc if rc >= 0 else 128 - rc)


def main() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # the group's SIGTERM is for the server
    server = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL,
                              preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))  # noqa: PLW1509  no threads yet
    threading.Thread(target=_exit_with, args=(server,), daemon=True).start()
    sys.stdin.buffer.read()                       # returns at end of file: the worker closed it or is gone
    os.killpg(0, signal.SIGTERM)
    end = time.monotonic() + GRACE_S
    while server.poll() is None and time.monotonic() < end:
        time.sleep(0.1)
    os.killpg(0, signal.SIGKILL)                  # the server's children, and this process last


if __name__ == "__main__":
    main()
