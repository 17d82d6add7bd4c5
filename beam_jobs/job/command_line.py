"""The command line around the job's own flags: the arguments Beam takes as pipeline
options (each a real one, else one line naming the nearest flag), every flag given once,
and the runner the options name."""
from __future__ import annotations

import argparse
import difflib

from beam_jobs.job.errors import Refused


def _beam_parser() -> argparse.ArgumentParser:
    """Every option of Beam's PipelineOptions subclasses, as Beam itself parses them."""
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    for cls in PipelineOptions.__subclasses__():
        cls._add_argparse_args(parser)  # pylint: disable=protected-access
    return parser


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [o for action in parser._actions for o in action.option_strings
            if o.startswith("--")]


def pipeline_args(parser: argparse.ArgumentParser, rest: list[str]) -> list[str]:
    """The arguments that are Beam pipeline options; anything else ends the job with a
    line that names it (and the nearest real flag)."""
    beam = _beam_parser()
    _, unknown = beam.parse_known_args(rest)
    if unknown:
        first = unknown[0]
        if first.startswith("-"):
            name = first.split("=", 1)[0]
            near = difflib.get_close_matches(name, _option_strings(parser) + _option_strings(beam),
                                             n=1, cutoff=0.6)
            raise Refused(f"{name}: unknown flag" + (f" (did you mean {near[0]}?)" if near
                                                     else ""))
        raise Refused(f"unexpected argument {first!r}: every value belongs to a flag "
                      "(several inputs go after one --input)")
    refuse_repeats(rest, beam)
    return rest


# Flag actions that keep one value; others gather every occurrence (--input, Beam's
# --experiments and its other list and dict options): given twice they mean both.
_ONE_VALUE = (argparse._StoreAction, argparse._StoreConstAction, argparse._StoreTrueAction,
              argparse._StoreFalseAction, argparse.BooleanOptionalAction)


def refuse_repeats(argv: list[str], parser: argparse.ArgumentParser) -> None:
    """`Refused` for a flag of `parser` given twice (`--window 8 --window 4`), which
    argparse would settle silently by the last one; under any of its spellings."""
    actions = {option: action for action in parser._actions
               for option in action.option_strings}
    seen: dict[int, str] = {}
    for arg in map(str, argv):
        name = arg.split("=", 1)[0]
        action = actions.get(name) if arg.startswith("-") else None
        if type(action) not in _ONE_VALUE:   # not a flag, or one that gathers
            continue
        if id(action) in seen:
            again = "" if seen[id(action)] == name else f" (as {seen[id(action)]})"
            raise Refused(f"{name}: given twice{again}; give it once")
        seen[id(action)] = name


def runner_name(pipeline_args: list[str]) -> str:
    """The class name of the runner the options ask for (FnApiRunner when none);
    `Refused` for a runner Beam does not know."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners.runner import create_runner

    name = PipelineOptions(pipeline_args).view_as(StandardOptions).runner or "FnApiRunner"
    try:
        return type(create_runner(name)).__name__
    except (ValueError, ImportError, AttributeError) as e:
        raise Refused(f"--runner: {name!r} is not a Beam runner (e.g. DirectRunner, "
                      f"DataflowRunner, FlinkRunner, SparkRunner, PrismRunner): "
                      f"{str(e).splitlines()[0][:120]}") from None
