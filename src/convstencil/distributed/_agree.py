"""Errors raised on one rank reach every rank.

A rank that raises before a collective call leaves the others waiting in
it forever.  So every step that can fail locally (argument checks, an
engine call) runs inside `agree`, which ends with a collective vote: if
any rank failed, every rank raises (the failing rank its own exception,
the others the same type naming that rank), and no rank goes on to the
next collective call.
"""
from mpi4py import MPI

# Exception types carried across ranks as themselves; others become
# RuntimeError.
_KINDS = {cls.__name__: cls for cls in
          (TypeError, ValueError, MemoryError, ImportError, RuntimeError,
           OverflowError, KeyboardInterrupt)}


def agree(comm, fn, *args):
    """fn(*args) on every rank; raise everywhere if it raised anywhere."""
    failure = None
    try:
        result = fn(*args)
    except BaseException as exc:  # noqa: B902 - re-raised below
        failure = exc
        result = None
    check(comm, failure)
    return result


def check(comm, failure):
    """The vote: `failure` is this rank's exception or None."""
    if comm.allreduce(0 if failure is None else 1, op=MPI.SUM) == 0:
        return
    messages = comm.allgather(
        None if failure is None
        else (type(failure).__name__, str(failure)))
    if failure is not None:
        raise failure
    rank, (kind, text) = next((r, m) for r, m in enumerate(messages) if m)
    raise _KINDS.get(kind, RuntimeError)("on rank %d: %s: %s"
                                         % (rank, kind, text))
