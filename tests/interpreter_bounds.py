"""Out-of-bounds checks for Triton kernels run under the interpreter.

The interpreter runs a kernel on the CPU tensors' own memory through raw addresses. A lane that reads past a tensor
reads whatever the heap holds there; a lane that writes past it corrupts the heap. Neither need fail where it
happens: the corruption can surface tests later (a crash in the garbage collector). With `install()`, every unmasked
lane of every pointer load, store and atomic must fall inside the storage of one of the launch's tensor arguments, or
the access raises `OutOfBounds`, naming the kernel and how far outside the nearest argument the address is. (Tensor
descriptor loads and stores, which no plugin uses, are not checked.)
"""

from __future__ import annotations

import contextvars
import functools

import numpy as np

# (starts, ends, kernel name) of the launch being interpreted
_LAUNCH: contextvars.ContextVar = contextvars.ContextVar("interpreter_launch", default=None)


class OutOfBounds(AssertionError):
    """A kernel lane addressed memory outside every tensor argument of its launch."""


def _storage_ranges(values) -> list[tuple[int, int]]:
    ranges = []
    for value in values:
        if isinstance(value, (tuple, list)):
            ranges += _storage_ranges(value)
        elif hasattr(value, "untyped_storage"):
            storage = value.untyped_storage()
            ranges.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    return ranges


def launch_ranges(args, kwargs, name: str):
    """What `check` compares against: the sorted storage ranges of a launch's tensor arguments."""
    ranges = sorted(_storage_ranges(list(args) + list(kwargs.values())))
    starts = np.array([r[0] for r in ranges], dtype=np.uint64)
    ends = np.array([r[1] for r in ranges], dtype=np.uint64)
    return starts, ends, name


def check(addresses: np.ndarray, size: int, launch, access: str) -> None:
    """Raise OutOfBounds unless each address .. address + size - 1 lies in one range of `launch`."""
    if launch is None or addresses.size == 0:
        return
    starts, ends, name = launch
    addresses = addresses.astype(np.uint64).ravel()
    slot = np.searchsorted(starts, addresses, side="right") - 1
    inside = slot >= 0
    inside[inside] &= addresses[inside] + np.uint64(size) <= ends[slot[inside]]
    if inside.all():
        return
    bad = int(addresses[~inside][0])
    nearest = min(range(len(starts)), key=lambda i: min(abs(bad - int(starts[i])), abs(bad - int(ends[i]))),
                  default=None)
    where = "no tensor argument" if nearest is None else (
        f"{bad - int(ends[nearest])} bytes past the end of argument storage #{nearest}" if bad >= int(ends[nearest])
        else f"{int(starts[nearest]) - bad} bytes before argument storage #{nearest}")
    raise OutOfBounds(f"{name}: {access} of {int((~inside).sum())} lane(s) outside the launch's tensors, e.g. "
                      f"{where} ({len(starts)} tensor arguments)")


def _element_size(pointers) -> int:
    from triton.runtime.interpreter import _get_np_dtype

    return np.dtype(_get_np_dtype(pointers.get_element_ty())).itemsize


def _checked(method, access: str, pointer_at: int, mask_at: int | None):
    """`method` with its lanes checked first: its pointers and mask are its positional arguments pointer_at and
    mask_at (None: no mask)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        pointers = args[pointer_at]
        mask = args[mask_at] if mask_at is not None and mask_at < len(args) else None
        addresses = pointers.data
        if mask is not None and mask.data is not None:
            addresses = addresses[np.broadcast_to(mask.data, addresses.shape)]
        check(np.asarray(addresses), _element_size(pointers), _LAUNCH.get(), access)
        return method(self, *args, **kwargs)

    return run


def install() -> None:
    """Check every access of every interpreted launch from now on (idempotent)."""
    from triton.runtime import interpreter

    if getattr(interpreter.GridExecutor, "_bounds_checked", False):
        return
    builder = interpreter.InterpreterBuilder
    # (method, what it does, the positions of its pointers and mask among its arguments)
    for name, access, pointer_at, mask_at in [("create_masked_load", "load", 0, 1),
                                              ("create_masked_store", "store", 0, 2),
                                              ("create_atomic_rmw", "atomic", 1, 3),
                                              ("create_atomic_cas", "atomic", 0, None)]:
        if hasattr(builder, name):
            setattr(builder, name, _checked(getattr(builder, name), access, pointer_at, mask_at))
    launch = interpreter.GridExecutor.__call__

    @functools.wraps(launch)
    def call(self, *args, **kwargs):
        token = _LAUNCH.set(launch_ranges(args, kwargs, getattr(self.fn, "__name__", "kernel")))
        try:
            return launch(self, *args, **kwargs)
        finally:
            _LAUNCH.reset(token)

    interpreter.GridExecutor.__call__ = call
    interpreter.GridExecutor._bounds_checked = True
