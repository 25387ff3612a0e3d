"""How a model's parameters are created and written: the seam through which ZeRO-3 builds a model
partitioned, without the model code knowing about ranks or DeepSpeed.

`build_model` and `initialize_weights` take a `Construction`; `PLAIN` builds ordinary modules
whose parameters are whole and written in place. runtime/partitioned.py gives the ZeRO-3 one,
chosen by the caller from its DeepSpeed config.
"""

from __future__ import annotations

import contextlib

import torch


class Construction:
    """Plain construction: whole parameters, written in place, placed on the layout's device."""

    partitioned = False
    """Whether parameters are split over ranks as they are created (then left where they are)."""

    def context(self):
        """The context the model's modules are constructed in."""
        return contextlib.nullcontext()

    def writable(self, param: torch.Tensor):
        """A context in which `param` is whole and writes to it are kept."""
        return contextlib.nullcontext()

    def full_shape(self, param: torch.Tensor) -> torch.Size:
        """The parameter's shape on this tensor-parallel rank, whatever holds it."""
        return param.shape


PLAIN = Construction()
