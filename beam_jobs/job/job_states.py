"""What a distributed runner says of a job: the state of the job that holds an output
directory's lease (outdir/lease.py asks before it takes one over), and of a job the
launcher cancelled (it releases the lease only once the runner confirms the job stopped).

A state is trusted as far as its runner keeps its word:
- Dataflow reports a job DONE, FAILED, CANCELLED, DRAINED or UPDATED once its workers
  stopped (CANCELLING and DRAINING before).
- A portable job service reports DONE and FAILED when the job's run ended; CANCELLED is
  not trusted, because Beam's local job service says it at once and lets the job run on
  (local_job_service.py: "TODO(robertwb): Actually cancel..."), to DONE or FAILED later.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Optional

from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
)
from apache_beam.runners.runner import PipelineResult

from beam_jobs.outdir.holder import Ask, CannotAsk, Job, JobState

TERMINAL = frozenset({"DONE", "FAILED", "CANCELLED", "DRAINED", "UPDATED"})
PORTABLE_STOPPED = frozenset({"DONE", "FAILED", "DRAINED", "UPDATED"})
ASK_TIMEOUT_SECONDS = 20.0   # a runner's answer about a job: past it, it cannot be asked
ASKING = "make_shards-asking-dataflow"   # the name of a thread that asks Dataflow
CANCEL_WAIT_SECONDS = 120.0


def job_of(runner: str, name: str, options: PipelineOptions) -> Job:
    """The job a distributed run submits, and where its runner is asked about it."""
    if runner == "DataflowRunner":
        cloud = options.view_as(GoogleCloudOptions)
        return Job(runner, name, project=cloud.project, region=cloud.region)
    return Job(runner, name, endpoint=options.view_as(PortableOptions).job_endpoint)


def job_id(result: PipelineResult) -> Optional[str]:
    """The runner's id of a submitted job (Dataflow's job_id(); a portable job service's
    id, which Beam's PortableRunner keeps as `_job_id`)."""
    of_dataflow = getattr(result, "job_id", None)   # not on every PipelineResult
    if callable(of_dataflow):
        return of_dataflow()
    return getattr(result, "_job_id", None)


def asker(pipeline_args: list[str]) -> Ask:
    """How this run asks a runner about a job: a portable job service at the job's
    endpoint, or Dataflow with this run's credentials options (--no_auth and the like)
    and the job's project and region."""
    def ask(job: Job) -> JobState:
        if job.runner == "DataflowRunner" and job.project and job.region:
            name = _dataflow_state(job, job.project, job.region, pipeline_args)
            return JobState(name, name in TERMINAL, name in TERMINAL)
        if job.endpoint and job.runner != "DataflowRunner":
            name = _portable_state(job, job.endpoint)
            return JobState(name, name in PORTABLE_STOPPED, name in TERMINAL)
        raise CannotAsk(f"the lease does not say where to ask {job.runner or 'its runner'}")
    return ask


def _portable_state(job: Job, endpoint: str) -> str:
    import grpc
    from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        try:
            state = beam_job_api_pb2_grpc.JobServiceStub(channel).GetState(
                beam_job_api_pb2.GetJobStateRequest(job_id=job.id),
                timeout=ASK_TIMEOUT_SECONDS)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE:
                raise CannotAsk(f"no job service answers at {endpoint}") from None
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise CannotAsk(f"the job service at {endpoint} did not answer in "
                                f"{ASK_TIMEOUT_SECONDS:.0f} s") from None
            raise CannotAsk(f"the job service at {endpoint} does not know the job "
                            f"({e.code().name})") from None
    return beam_job_api_pb2.JobState.Enum.Name(state.state)


def _dataflow_state(job: Job, project: str, region: str, pipeline_args: list[str]) -> str:
    """Asked in a thread of its own, waited for ASK_TIMEOUT_SECONDS: where Dataflow
    cannot be reached, its client retries for minutes (credentials, then each request),
    logging a warning and a traceback a try. Past the deadline the thread is left to
    end on its own, its log silenced (`asking_quietly`)."""
    answer: list = []
    thread = threading.Thread(target=_ask_dataflow,
                              args=(job, project, region, pipeline_args, answer),
                              name=f"{ASKING}-{job.id}", daemon=True)
    thread.start()
    thread.join(ASK_TIMEOUT_SECONDS)
    if not answer:
        raise CannotAsk(f"Dataflow did not answer in {ASK_TIMEOUT_SECONDS:.0f} s")
    if isinstance(answer[0], Exception):   # the client's errors: HTTP, gRPC, auth
        raise CannotAsk(f"Dataflow did not answer: {' '.join(str(answer[0]).split())[:200]}")
    return answer[0]


def _ask_dataflow(job: Job, project: str, region: str, pipeline_args: list[str],
                  answer: list) -> None:
    from apache_beam.runners.dataflow.internal import apiclient

    options = PipelineOptions([*pipeline_args, "--project", project, "--region", region])
    try:
        found = apiclient.DataflowApplicationClient(options).get_job(job.id)
        answer.append(found.current_state.name.removeprefix("JOB_STATE_"))
    except Exception as e:
        answer.append(e)


def asking_quietly(record: logging.LogRecord) -> bool:
    """A logging filter that drops what a thread asking Dataflow logs (retries, and the
    tracebacks of each): the question's answer, or its deadline, is the line."""
    return not (record.threadName or "").startswith(ASKING)


def cancel(result: PipelineResult, job: Job, ask: Ask,
           wait: float = CANCEL_WAIT_SECONDS) -> Optional[JobState]:
    """Ask the runner to cancel the job, then wait up to `wait` seconds for a terminal
    state; the last state the runner gave (None: it could not be asked)."""
    try:
        result.cancel()
    except Exception:   # it ended meanwhile, or the runner is gone: its state says which
        pass
    deadline, state = time.monotonic() + wait, None
    while True:
        try:
            state = ask(job)
        except CannotAsk:
            state = None
        if (state is not None and state.terminal) or time.monotonic() > deadline:
            return state
        time.sleep(1.0)

