"""Killing a writer between its file-system steps, to check what it leaves at every instant.

`lmpipe.serving.directory_swap` does its file-system work through a few atomic steps
(`_mkdir`, `_rename`, `_exchange`, `_remove`). `StepKiller` replaces them: every step runs as
before and then calls `after_step` (to check the state at that instant), until step `kill_at`,
which raises `Killed` without running; from then on every step raises without running, as
nothing runs in a dead process (so cleanup code cannot tidy up what a real kill would leave).
"""

import errno
import os
import subprocess
import sys

from lmpipe.serving import directory_swap

STEPS = ("_mkdir", "_rename", "_exchange", "_remove")


class Killed(BaseException):
    """The simulated kill (a BaseException, as KeyboardInterrupt, so no `except Exception`
    handler swallows it)."""


class StepKiller:
    """Counts the writer's steps; kills it at step `kill_at` (1-based; None: never).

    Args:
        monkeypatch: pytest's fixture.
        kill_at: the step that does not run.
        after_step: called with the step's name after each step that ran.
        swap: False makes `_exchange` fail as on a file system that cannot swap.
    """

    def __init__(self, monkeypatch, kill_at=None, after_step=None, swap=True):
        self.kill_at = kill_at
        self.after_step = after_step
        self.steps = []
        self.dead = False
        for name in STEPS:
            real = getattr(directory_swap, name)
            if name == "_exchange" and not swap:
                real = _cannot_swap
            monkeypatch.setattr(directory_swap, name, self._wrap(name, real))

    def _wrap(self, name, real):
        def step(*arguments):
            if self.dead or len(self.steps) + 1 == self.kill_at:
                self.dead = True
                raise Killed(name)
            self.steps.append(name)
            result = real(*arguments)
            if self.after_step is not None:
                self.after_step(name)
            return result

        return step


def _cannot_swap(first, second):
    raise OSError(errno.EINVAL, "swap not supported here", first, None, second)


def swap_works(directory):
    """Whether this file system swaps two directories atomically (else: skip those tests)."""
    first, second = os.path.join(directory, "swap-a"), os.path.join(directory, "swap-b")
    os.mkdir(first)
    os.mkdir(second)
    try:
        directory_swap._exchange(first, second)
        return True
    except OSError:
        return False
    finally:
        os.rmdir(first)
        os.rmdir(second)


def dead_pid():
    """The process id of a process that has ended."""
    result = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(result.stdout)


def as_written_by(directory, pid):
    """Rename the hidden leftovers of this process in `directory` as if process `pid` had
    written them (a killed writer's pid is no longer running)."""
    own = f"-lmpipe-{os.getpid()}-"
    for name in os.listdir(directory):
        if own in name:
            os.rename(
                os.path.join(directory, name),
                os.path.join(directory, name.replace(own, f"-lmpipe-{pid}-")),
            )


def hidden_entries(directory):
    """The hidden lmpipe directories in `directory`."""
    return sorted(name for name in os.listdir(directory) if "-lmpipe-" in name)


def tree(directory):
    """`{relative path: bytes}` of every file under `directory` (None if it is missing)."""
    if not os.path.isdir(directory):
        return None
    files = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as file:
                files[os.path.relpath(path, directory)] = file.read()
    return files
