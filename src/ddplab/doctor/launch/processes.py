"""The rank processes: forked from the zygote (torch imported once), each in a session of its
own, its output in a log file; ended, with everything they started, by killing their
sessions. One zygote may serve several runs at once (the corpus tests share one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading


class Zygote:
    """``python -m ddplab.doctor.launch.zygote``, and the ranks it forked for us."""

    def __init__(self, env: dict, log: str):
        self._log = open(log, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ddplab.doctor.launch.zygote"], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, start_new_session=True)
        self.exits: dict[int, int] = {}  # pid -> exit status
        self._started: dict[int, int] = {}  # request -> pid
        self._requests = 0
        self._forked = threading.Condition()
        ready = self.process.stdout.readline()
        if not ready:
            raise RuntimeError(f"the doctor's zygote did not start (see {log})")
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name="ddplab-doctor-zygote")
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            message = json.loads(line)
            with self._forked:
                if "pid" in message:
                    self._started[message["request"]] = message["pid"]
                else:
                    self.exits[message["exit"]] = message["status"]
                self._forked.notify_all()

    def start(self, env: dict, log: str, cwd: str) -> int:
        """Fork a rank with ``env`` (the whole environment) in ``cwd``; its pid."""
        with self._forked:
            self._requests += 1
            request = self._requests
            self.process.stdin.write((json.dumps({"request": request, "log": log, "env": env,
                                                  "cwd": cwd}) + "\n").encode())
            self.process.stdin.flush()
            if not self._forked.wait_for(lambda: request in self._started, timeout=30):
                raise RuntimeError("the doctor's zygote did not fork a rank")
            return self._started.pop(request)

    def status(self, pid: int):
        """The exit status of ``pid``, or None while it runs."""
        return self.exits.get(pid)

    def kill(self, pids) -> None:
        """Kill each rank's session: the rank and everything it started."""
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        """End the zygote (ranks still running die with it: they are set to)."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._log.close()
