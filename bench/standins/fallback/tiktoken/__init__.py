"""A stand-in for tiktoken, last on bench/real_runner.py's path (an installed tiktoken wins):
nanoGPT's sample.py imports tiktoken at the top but encodes with it only when its data set
has no meta.pkl, which bench/real_programs.py always writes.  Using it is an error."""

__version__ = "0.0-standin"


def get_encoding(name):
    raise ImportError(f"tiktoken is not installed (bench/standins/fallback stand-in): "
                      f"get_encoding({name!r}) needs the real package")
