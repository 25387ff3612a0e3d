"""Counting the places where the host waits for a device value (`.item()`, `float(t)`, boolean
indexing, `nonzero`, ...): on a GPU each one stalls the host until the device has drained its
queue. Counted on CPU: a dispatch mode sees every operator whose result size or value the host
must wait for. (`Tensor.tolist` and `Tensor.cpu` bypass the dispatcher; tests that count them
wrap them.)"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Operators that make the host wait for a device value.
READS = {"aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.is_nonzero", "aten.equal", "aten.unique_consecutive",
         "aten._unique2"}


class HostReads(TorchDispatchMode):
    """`with HostReads() as reads:` ... then `reads.names`: one entry per device read, in order;
    boolean indexing is recorded as "aten.index[bool]"."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        bool_index = name == "aten.index" and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ()) if i is not None
        )
        if name in READS or bool_index:
            self.names.append(name + ("[bool]" if bool_index else ""))
        return func(*args, **(kwargs or {}))
