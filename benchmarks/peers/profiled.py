"""Run an agent module under cProfile switched on and off by signals, for
``benchmarks/turn_cost.py``: ``python benchmarks/peers/profiled.py OUT -m module args...``.

SIGUSR1 starts a profile of the main thread (where every agent here runs its event loop),
SIGUSR2 stops it and writes ``OUT.<n>.prof`` (n = 1, 2, ...). Each switch then writes its
state (``on`` / ``off``) to ``OUT.ack``, which the driver waits for. Standard library only:
it also runs under the interpreter of acpkit's throw-away virtualenv.
"""

from __future__ import annotations

import cProfile
import runpy
import signal
import sys
from pathlib import Path
from types import FrameType


def main() -> None:
    out, dash_m, module, *args = sys.argv[1:]
    if dash_m != "-m":
        raise SystemExit("usage: profiled.py OUT -m module args...")
    sys.argv = [module, *args]
    ack = Path(out + ".ack")
    profiles: list[cProfile.Profile] = []

    def on(signum: int, frame: FrameType | None) -> None:
        profiles.append(cProfile.Profile())
        ack.write_text("on")
        profiles[-1].enable()

    def off(signum: int, frame: FrameType | None) -> None:
        profiles[-1].disable()
        profiles[-1].dump_stats(f"{out}.{len(profiles)}.prof")
        ack.write_text("off")

    signal.signal(signal.SIGUSR1, on)
    signal.signal(signal.SIGUSR2, off)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
