"""`python tests/die_during_save.py STEP kjax ARGS...`: runs `kjax ARGS...`,
but this process kills itself with SIGKILL in the middle of saving
checkpoint STEP — after its arrays are written, before its own part of the
step is committed — as a host that crashes during a save would
(tests/test_multiprocess.py). Nothing in kjax knows about it."""
import os
import signal
import sys

from kjax.checkpoint import manager
from kjax.cli import main

STEP = sys.argv.pop(1)
_save = manager.ProcessJsonHandler.save


def save_or_die(self, directory, args=None):
    # orbax writes a step into "<step>.orbax-checkpoint-tmp…/data" until it commits
    if os.path.basename(os.path.dirname(str(directory))).split(".")[0] == STEP:
        print(f"die_during_save: SIGKILL while saving step {STEP}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return _save(self, directory, args)


manager.ProcessJsonHandler.save = save_or_die
sys.exit(main(sys.argv[1:]))
