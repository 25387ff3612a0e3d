"""The entrypoints run by path (`deepspeed bert_ds/pretrain.py`, `python bert_ds/finetune/ner.py`)
import the installed package, with no sys.path edits of their own: from any folder, and with
nothing beside them that could take the place of a module a library imports."""

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import REPO

from bert_ds.finetune.task import TASK_FILES, finetune_task

# Every fine-tuning task of the registry runs by its own file's path.
ENTRYPOINTS = ("bert_ds/pretrain.py", *(finetune_task(name).script for name in TASK_FILES))


def test_every_registered_task_names_its_own_file():
    for name, module in TASK_FILES.items():
        script = finetune_task(name).script
        assert script == module.replace(".", "/") + ".py" and (Path(REPO) / script).is_file(), (name, script)


def test_no_module_beside_an_entrypoint_shadows_an_importable_one():
    """Run by path, a script's folder is first on sys.path: a file there named like a standard or
    installed module (`types.py`, `datasets/`) would replace it for every library in the process."""
    repo = Path(REPO).resolve()

    def outside_repo(module) -> bool:
        where = Path(getattr(module.module_finder, "path", "/")).resolve()
        return where != repo and repo not in where.parents

    importable = set(sys.stdlib_module_names) | {m.name for m in pkgutil.iter_modules() if outside_repo(m)}
    for folder in sorted({(repo / script).parent for script in ENTRYPOINTS}):
        beside = {p.stem for p in folder.glob("*.py")} | {d.name for d in folder.iterdir() if (d / "__init__.py").is_file()}
        assert not beside & importable, (folder, sorted(beside & importable))


def test_every_entrypoint_runs_by_path_from_another_folder(tmp_path):
    """As a user runs them: the installed package (`make install`: editable), no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for script in ENTRYPOINTS:
        result = subprocess.run([sys.executable, str(Path(REPO) / script), "--help"], capture_output=True, text=True,
                                cwd=tmp_path, env=env, timeout=120)
        assert result.returncode == 0 and result.stdout.startswith(f"usage: {script}"), (script, result.stderr[-2000:])
        assert "sys.path" not in (Path(REPO) / script).read_text()


def test_jobs_start_without_importing_torch_inductor():
    """megatron's fused kernels and DeepSpeed's Muon optimizer (which deepspeed.initialize imports)
    are imported without their torch.compile decorators (bert_ds never calls them): no TorchInductor
    import, about 3 s, at the start of every process."""
    code = ("import sys, torch; compile_ = torch.compile\n"
            "import bert_ds.training.job, bert_ds.finetune.core, bert_ds.model.pipeline\n"
            "from bert_ds.config import model_preset; from bert_ds.model.megatron_config import transformer_config\n"
            "transformer_config(model_preset('tiny'))\n"
            "import megatron.core.fusions.fused_bias_gelu as gelu\n"
            "import deepspeed.runtime.zero.muon.muon_optimizer  # deepspeed.initialize imports it\n"
            "print('torch._inductor.compile_fx' in sys.modules, torch.compile is compile_, gelu.bias_gelu_impl is not None)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines()[-1].split() == ["False", "True", "True"], result.stdout[-2000:] + result.stderr[-2000:]
