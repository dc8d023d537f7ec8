"""A tap between two stdio peers: runs CMD, relays our stdin to it and its stdout to
ours unchanged, and logs both directions (LOG.in, LOG.out) byte for byte.

Usage: tee.py LOG -- CMD ARGS...
"""

import os
import signal
import subprocess
import sys
import threading


def pump(src, dst, log, close_dst):
    with open(log, "wb") as out:
        while True:
            chunk = os.read(src, 65536)
            if not chunk:
                break
            out.write(chunk)
            out.flush()
            try:
                if isinstance(dst, int):
                    while chunk:
                        chunk = chunk[os.write(dst, chunk):]
                else:
                    dst.write(chunk)
                    dst.flush()
            except OSError:
                break
    if close_dst:
        try:
            dst.close()
        except OSError:
            pass


def main():
    log = sys.argv[1]
    assert sys.argv[2] == "--"
    child = subprocess.Popen(sys.argv[3:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    # Signals meant for the peer reach it.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    threading.Thread(
        target=pump, args=(0, child.stdin, log + ".in", True), daemon=True
    ).start()
    out = threading.Thread(
        target=pump, args=(child.stdout.fileno(), 1, log + ".out", False)
    )
    out.start()
    code = child.wait()
    out.join()
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
