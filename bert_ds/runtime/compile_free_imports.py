"""Import megatron-core and DeepSpeed's Muon optimizer without their torch.compile decorators.

megatron decorates its fused functions (bias-GELU, bias-SwiGLU, bias-dropout-add, ...) with
`megatron.core.jit.jit_fuser`, which is `torch.compile` on torch >= 2.2. Decorating a function
imports TorchInductor, about 3 s of every process start on a 2-core CPU (a 4-step tiny job: 17.2 s
-> 13.9 s), for functions bert_ds never calls: its TransformerConfig turns every megatron fusion
off (config.transformer_config), and its bias-dropout-add is its own (model/dropout.py).

DeepSpeed does the same to its Muon optimizer (`@compiler.compile()` at import), a module
`deepspeed.initialize` imports for every engine to check whether the optimizer is ZeRO-supported:
another 1.7 s per process for an optimizer bert_ds never builds.

So these modules are first imported here, with torch.compile standing in as an identity
decorator for the length of the import; nothing else in the process sees the difference (torch's
optimizers still import TorchDynamo, which they need). Every bert_ds module that uses megatron is
imported after this runs: `bert_ds/model/__init__.py`, `distributed.init_parallel` and
`config.transformer_config` call it first, and every engine is built after init_parallel.
"""

from __future__ import annotations

import sys

MEGATRON_MODULES = (
    "megatron.core",
    "megatron.core.fusions.fused_bias_dropout",
    "megatron.core.models.backends",
    "megatron.core.parallel_state",
    "megatron.core.process_groups_config",
    "megatron.core.tensor_parallel",
    "megatron.core.transformer",
    "megatron.core.transformer.attention",
    "megatron.core.transformer.mlp",
    "megatron.core.transformer.transformer_block",
    "megatron.core.transformer.transformer_layer",
)
"""What bert_ds imports from megatron (the fused kernels' modules come with them)."""
DEEPSPEED_MODULES = ("deepspeed.runtime.zero.muon.muon_optimizer",)
"""What `deepspeed.initialize` imports whose functions are compiled at import."""
COMPILED_AT_IMPORT = MEGATRON_MODULES + DEEPSPEED_MODULES


def _identity_compile(model=None, **_options):
    return model if model is not None else (lambda function: function)


def import_without_compile() -> None:
    """Import COMPILED_AT_IMPORT once per process, with torch.compile as an identity decorator."""
    if all(name in sys.modules for name in COMPILED_AT_IMPORT):
        return
    import importlib

    import torch

    compile_ = torch.compile
    torch.compile = _identity_compile
    try:
        for name in COMPILED_AT_IMPORT:
            importlib.import_module(name)
    finally:
        torch.compile = compile_
