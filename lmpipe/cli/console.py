"""What the `lmpipe` command shows on the terminal: TensorFlow's native log lines left out.

TensorFlow's C++ code writes its start-up lines ("oneDNN custom operations are on", "Could not
find cuda drivers", "failed call to cuInit", the CPU instructions it was not built for)
straight to file descriptor 2, before any setting a Python program can make reaches them
(`TF_CPP_MIN_LOG_LEVEL` does not hide them in TensorFlow 2.21). `hide_native_logs` puts a
filter on descriptor 2 itself: lines in the native log format are dropped, everything else
(Python's messages, warnings and tracebacks) passes through unchanged. The command installs
it unless `--verbose` is given.
"""

import atexit
import os
import re
import sys
import threading

# "I0000 00:00:1795619554.299362   24929 port.cc:153] ...": severity, date, time, thread id,
# file:line; the lines absl prints around them; and a task name alone on a line, the rest of
# the coordination service's "Example stragglers:" while a cluster forms.
NATIVE_LOG_LINE = re.compile(
    rb"^(?:[IWE]\d{4} [\d:.]+\s+\d+ [^\]\s]+:\d+\] "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|To enable the following instructions: .* rebuild TensorFlow"
    rb"|/job:[^/\s]+/replica:\d+/task:\d+$)"
)


def hide_native_logs():
    """Drop native log lines from this process's stderr (file descriptor 2) until it exits.

    Returns a function that stops the filter (also run at exit): it restores descriptor 2
    and passes on what was still in the pipe.
    """
    sys.stderr.flush()
    original = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward():
        with os.fdopen(read_end, "rb", buffering=0) as source:
            pending = b""
            while chunk := source.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not NATIVE_LOG_LINE.match(line):
                        os.write(original, line + b"\n")
            if pending and not NATIVE_LOG_LINE.match(pending):
                os.write(original, pending)

    thread = threading.Thread(target=forward, name="lmpipe-stderr", daemon=True)
    thread.start()
    stopped = []

    def stop():
        if stopped:
            return
        stopped.append(True)
        sys.stderr.flush()
        # Descriptor 2 was the pipe's last writer: pointing it back at the terminal ends the
        # pipe, and the thread passes on what is left.
        os.dup2(original, 2)
        thread.join(timeout=10)

    atexit.register(stop)
    return stop
