"""How a command's process ends, once the command has returned.

When Python exits it clears every module and runs full garbage collections over every
object still alive. After torch and transformers are imported that is a few million
objects. A process that only imports torch, transformers and its GPT-NeoX model ends
about 0.9 s later than the same process ending by ``os._exit``, and 0.6 s of that goes
when its objects are frozen first; a weight run over the seed paper's 255 checkpoints
took 11.2 to 11.8 s instead of 12.1 to 12.2 s (three pairs, 2026-11-29, 2-core CPU; the
run ``python bench/bench_seed_weights.py`` times). :func:`run_command` moves the objects
into the collector's permanent generation (:func:`gc.freeze`), which the teardown's
collections skip.

Nothing is lost by it. The command has written and closed its files (every write is
atomic); ``atexit`` handlers (logging's flush, Ray's shutdown) still run, and the
standard streams are still flushed; Python promises no finalizer to an object that is
still alive at exit in any case. Only a process's last act: a library, notebook or test
process goes on allocating, and freezing its objects would keep its garbage forever, so
:func:`run_command` is called by the scripts' ``__main__`` blocks and the ``toposig``
console command, never by a command's ``main``.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

Status = TypeVar("Status", int, None)


def run_command(main: Callable[[], Status]) -> Status:
    """``main()``'s exit status, unchanged, after :func:`gc.freeze` once it has returned
    (the module doc says why; an exception leaves the process as usual)."""
    status = main()
    gc.freeze()
    return status
