"""What a DataLoader's forkserver imports before it forks a worker (`readers.workers.
forkserver()` names this module for it): PyTorch's data loading and readers.numpy, so
that no worker imports them again (about 0.8 s of CPU each), then every object made so
far frozen out of the garbage collector (`gc.freeze`), so that a worker's collections
do not touch them: a collection writes into each object it looks at, and each page it
writes is copied from the forkserver's (about 0.07 s of CPU a worker with torch, each
epoch a DataLoader starts its workers).

Import it in a forkserver only: in any other process, the objects it freezes are never
collected again.
"""
import gc

import torch.utils.data  # noqa: F401 (imported once, for every worker)

import readers.handover  # noqa: F401
import readers.numpy  # noqa: F401
import readers.workers  # noqa: F401

gc.collect()
gc.freeze()
