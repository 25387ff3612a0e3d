import re
import subprocess
import sys

import pytest

from tests.support.helpers import needs_fast_bf16

# auto is fp32 in the suite (tests/conftest.py); bf16 is what auto picks on CPUs with AMX or AVX512-BF16.
@pytest.mark.parametrize("precision", ["auto", pytest.param("bf16", marks=needs_fast_bf16)])
def test_demo_pretrains_and_reports_held_out_predictions(tmp_path, shared_cache, precision):
    run = subprocess.run(
        [sys.executable, "-m", "bert_ds.demo", "--preset", "tiny", "--steps", "12", "--log-interval", "4",
         "--output", str(tmp_path / "demo"), "--precision", precision],
        capture_output=True, text=True, timeout=600, env={**__import__("os").environ, "BERT_DS_CACHE": shared_cache},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert f"on CPU in {'fp32' if precision == 'auto' else 'bf16'} (" in out
    assert re.search(r"step 12/12 .*loss", out)
    assert "saved checkpoint" in out and (tmp_path / "demo" / "latest").read_text() == "step00000012"
    guesses = re.findall(r"\[MASK\] = (.*) model's top 3: (.*)", out)
    assert len(guesses) >= 5
    # The held-out text is clean: no `<unk>` placeholders, so no `<`, `unk`, `>` pieces to mask or guess.
    pieces = [p.strip(" '\"") for truth, top in guesses for p in [truth, *top.split(", ")]]
    assert not {"<", ">", "unk", "<unk>"} & set(pieces), pieces
    accuracy = float(re.search(r"Masked-token accuracy on held-out text: ([\d.]+)%", out).group(1))
    baseline = float(re.search(r"always guessing the most frequent token: ([\d.]+)%", out).group(1))
    assert 0.0 <= accuracy <= 100.0 and 0.0 < baseline <= 100.0
    assert re.search(r"The most-frequent-token guess explains (all of it|\d+% of that accuracy)", out)
    # It evaluated on the held-out articles as it trained (every 12 // 6 steps) and drew the curves.
    assert len(re.findall(r"^eval at step \d+ \| mlm_loss", out, re.MULTILINE)) == 6
    assert (tmp_path / "demo" / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_init_shows_the_guesses_of_a_saved_checkpoint(tmp_path, shared_cache):
    """`--init DIR` trains nothing: it loads a run's checkpoint (its preset, layer-norm position
    and tokenizer from the save folder) and shows its guesses and held-out accuracy."""
    env = {**__import__("os").environ, "BERT_DS_CACHE": shared_cache}
    save = tmp_path / "run"
    train = subprocess.run(
        [sys.executable, "bert_ds/pretrain.py", "--preset", "tiny", "--layer-norm-position", "pre", "--train-steps", "3",
         "--save", str(save), "--log-interval", "1"], capture_output=True, text=True, timeout=600, env=env)
    assert train.returncode == 0, train.stderr[-3000:]
    for target in (save, save / "step00000003"):
        run = subprocess.run([sys.executable, "-m", "bert_ds.demo", "--init", str(target)],
                             capture_output=True, text=True, timeout=600, env=env)
        assert run.returncode == 0, run.stderr[-3000:]
        out = run.stdout
        assert f"the guesses of {target} (tiny, 3 steps, " in out and "resumed from" in out
        assert "step 1/" not in out  # nothing trained
        assert len(re.findall(r"\[MASK\] = (.*) model's top 3: (.*)", out)) >= 5
        assert re.search(r"Masked-token accuracy on held-out text: [\d.]+%", out)
    missing = subprocess.run([sys.executable, "-m", "bert_ds.demo", "--init", str(tmp_path / "nothing")],
                             capture_output=True, text=True, timeout=600, env=env)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines()[-1].startswith("error: ")
