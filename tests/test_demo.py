import re
import subprocess
import sys


def test_demo_pretrains_and_reports_held_out_predictions(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "bert_ds.demo", "--preset", "tiny", "--steps", "12", "--log-interval", "4",
         "--output", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=600, env={**__import__("os").environ, "BERT_DS_CACHE": str(tmp_path / "cache")},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert re.search(r"step 12/12 .*loss", out)
    assert "saved checkpoint" in out and (tmp_path / "demo" / "latest").read_text() == "step00000012"
    assert len(re.findall(r"\[MASK\] = .* model's top 3: ", out)) >= 5
    accuracy = float(re.search(r"Masked-token accuracy on held-out text: ([\d.]+)%", out).group(1))
    assert 0.0 <= accuracy <= 100.0
