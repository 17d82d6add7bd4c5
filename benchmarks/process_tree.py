"""Run a command and measure its whole process tree: wall time, CPU per process, peak RSS,
and the CPU that other processes of the machine used meanwhile (the noise); `tree_rss`
sums the RSS of a process tree. Shared by the job, memory, pixel and encoder benchmarks
(not a benchmark)."""
from __future__ import annotations

import os
import resource
import subprocess
import time

import psutil

SAMPLE_EVERY_S = 0.2
QUIET_PERCENT = 25
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 2**20


def _role(process: psutil.Process, root_pid: int) -> str:
    if process.pid == root_pid:
        return "main"
    try:
        cmdline = " ".join(process.cmdline())
    except psutil.Error:
        return "?"
    return "worker" if "sdk_worker_main" in cmdline or "worker_pool_main" in cmdline else "child"


def tree_members(process: psutil.Process) -> list[psutil.Process]:
    """`process` and its descendants; none once it has exited."""
    try:
        return [process] + process.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def tree_rss(process: psutil.Process) -> tuple[int, int]:
    """(sum of RSS over `process` and its descendants, number of processes). The sum
    counts pages that processes share (a forked worker's) once per process."""
    total, count = 0, 0
    for p in tree_members(process):
        try:
            total += p.memory_info().rss
            count += 1
        except psutil.NoSuchProcess:  # exited between listing and reading
            pass
    return total, count


def _busy_cpu_s() -> float:
    """CPU seconds all processes of the machine have used, all cores together."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def wait_for_quiet(max_wait_s: float) -> float:
    """Wait (up to max_wait_s) until other processes use under QUIET_PERCENT of the
    machine for one second; return the seconds waited."""
    start = time.perf_counter()
    while (psutil.cpu_percent(interval=1.0) > QUIET_PERCENT
           and time.perf_counter() - start < max_wait_s):
        pass
    return time.perf_counter() - start


def run_tree(command: list[str], log_path: str, cwd: str = REPO) -> dict:
    """Run `command` in `cwd`; its wall time, peak tree RSS, CPU seconds per process, the CPU
    seconds other processes of the machine used meanwhile, the bytes its processes wrote
    to storage (`written_mb`: the kernel's count as `/usr/bin/time -v` reports it, a page
    counted when it is dirtied, whether or not it was deleted before reaching the disk;
    of the processes waited for), a timeline and stdout."""
    cpu: dict[int, dict] = {}
    timeline = []   # (s, CPU s of the main process, CPU s of all others in the tree, procs)
    peak = 0
    with open(log_path, "w") as log:
        start, busy_start, own_start = time.perf_counter(), _busy_cpu_s(), time.process_time()
        blocks_start = resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock
        job = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        root = psutil.Process(job.pid)
        while job.poll() is None:
            members = tree_members(root)
            rss = 0
            for p in members:
                try:
                    times = p.cpu_times()
                    own = p.memory_info().rss
                except psutil.Error:
                    continue
                rss += own
                row = cpu.setdefault(p.pid, {"role": _role(p, job.pid)})
                row["cpu_s"] = round(times.user + times.system, 2)
                row["peak_mb"] = max(row.get("peak_mb", 0.0), round(own / MB, 1))
            peak = max(peak, rss)
            main_cpu = cpu.get(job.pid, {}).get("cpu_s", 0.0)
            timeline.append((round(time.perf_counter() - start, 2), main_cpu,
                             round(sum(r.get("cpu_s", 0.0) for r in cpu.values()) - main_cpu, 2),
                             len(members)))
            time.sleep(SAMPLE_EVERY_S)
        wall = time.perf_counter() - start
        busy = _busy_cpu_s() - busy_start - (time.process_time() - own_start)
        written = (resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock - blocks_start) * 512
    with open(log_path) as log:
        output = log.read()
    if job.returncode:
        tail = "\n".join(output.splitlines()[-20:])
        raise RuntimeError(f"exited with {job.returncode}: {' '.join(command)}\n{tail}")
    procs = sorted((r for r in cpu.values() if "cpu_s" in r),
                   key=lambda r: (r["role"] != "main", -r["cpu_s"]))
    tree_cpu = sum(r["cpu_s"] for r in procs)
    return {"wall_s": wall, "peak_mb": round(peak / MB, 1),
            "peak_process_mb": max((r["peak_mb"] for r in procs), default=0.0), "procs": procs,
            "cpu_s": round(tree_cpu, 1), "others_cpu_s": round(max(0.0, busy - tree_cpu), 1),
            "written_mb": round(written / MB, 1), "timeline": timeline, "output": output}
