"""The output directory: one run at a time (its lease), what a run may write there, and
what it may delete. The parts that write into it use these names only.

- `claim`: a run's claim on the directory (`claimed`, a context manager), its release.
- `inventory`: what lies in the directory, and whose it is.
- `cleanup`: deleting what a run provably wrote, and nothing the committed dataset lists;
  a cancelled job's commit fenced off.
- `derived`: the files derived from the committed dataset.json (TFDS's), kept in step.
- `lease`: one run at a time; `swap`: compare and swap on one small file, its primitive.
"""
from beam_jobs.outdir.claim import Claim, ClaimRequest, claimed, local_temp_base, prepare, release  # noqa: F401
from beam_jobs.outdir.cleanup import (  # noqa: F401
    abandon,
    clean_up_after_commit,
    clear_folder,
    commit_fenced,
    committed,
    delete_run_folder,
    delete_temp,
    fence_commit,
    holds_lease,
    leftover_paths,
    release_lease,
)
from beam_jobs.outdir.derived import repair as repair_derived  # noqa: F401
from beam_jobs.outdir.derived import write as write_derived  # noqa: F401
from beam_jobs.outdir.inventory import OutputDirError  # noqa: F401
from beam_jobs.outdir.lease import LeaseLost  # noqa: F401
