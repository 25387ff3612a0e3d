"""What every process needs before it trains: the device (device.py, the one module that names
an accelerator), process groups and RNG streams (distributed.py), launcher discovery
(launcher.py), the precision choice (precision.py), ZeRO-3 parameters (partitioned.py), host
memory tuning (host_memory.py), DeepSpeed's prebuilt ops (prebuild_ops.py), import shims
(compile_free_imports.py) and the cache folder (cache.py)."""
