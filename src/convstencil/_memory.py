"""What host memory can exist, checked before anything the size of a grid
is allocated.

On a machine that overcommits memory (Linux's default), allocating more
than exists does not fail: the process is killed later, by the kernel's
out-of-memory killer, when the pages are touched -- a notebook user loses
the whole kernel.  So a grid-sized allocation is first compared with the
physical memory, the process's address-space and data limits, and a
cgroup's memory limit, and refused with a MemoryError that names the
sizes.
"""
import os

try:
    import resource
except ImportError:  # not on every platform
    resource = None

_CGROUP_MAX = "/sys/fs/cgroup/memory.max"


def _gib(n):
    return "%.1f GiB" % (n / float(1 << 30))


def physical_bytes():
    """The machine's physical memory, or None where it cannot be read."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * size if pages > 0 and size > 0 else None


def process_limit_bytes():
    """The smallest soft limit of RLIMIT_AS and RLIMIT_DATA, or None."""
    if resource is None:
        return None
    limits = []
    for name in ("RLIMIT_AS", "RLIMIT_DATA"):
        which = getattr(resource, name, None)
        if which is None:
            continue
        try:
            soft, _ = resource.getrlimit(which)
        except (ValueError, OSError):
            continue
        if soft != resource.RLIM_INFINITY and soft > 0:
            limits.append(soft)
    return min(limits) if limits else None


def cgroup_limit_bytes(path=_CGROUP_MAX):
    """A cgroup v2 memory.max, or None (no limit, or none readable)."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def host_limit():
    """(bytes, what limits them): the most one process can have."""
    found = [(physical_bytes(), "physical memory"),
             (process_limit_bytes(), "the process's memory limit"),
             (cgroup_limit_bytes(), "the cgroup's memory limit")]
    found = [(n, what) for n, what in found if n is not None]
    return min(found) if found else (None, None)


def ensure_host_fits(nbytes, what):
    """Raise MemoryError if `nbytes` of host memory cannot exist."""
    limit, source = host_limit()
    if limit is not None and nbytes > limit:
        raise MemoryError(
            "%s needs %s of host memory; this machine allows %s (%s)"
            % (what, _gib(nbytes), _gib(limit), source))
