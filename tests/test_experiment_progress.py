"""The experiment's lines on its running steps (bert_ds/experiments/progress.py): the last progress
line of a log whose bars rewrite their line, a long line cut, a missing log, and the line format."""

import io
import time

from bert_ds.experiments.progress import LINE_CHARS, StepProgress, duration, last_progress_line


def test_the_last_line_of_a_log_is_the_latest_state_of_its_progress_bar(tmp_path):
    log = tmp_path / "cell.log"
    log.write_text("run 1/3: batch 32\nepoch 1/3:   0%|   | 0/625 [00:00<?, ?it/s]\repoch 1/3:  45%|##   | 280/625 "
                   "[01:10<01:30,  3.9it/s, loss=0.52]\r\n\n")
    assert last_progress_line(log) == "epoch 1/3: 45%|## | 280/625 [01:10<01:30, 3.9it/s, loss=0.52]"
    log.write_text("x" * 20_000)
    assert len(last_progress_line(log)) == LINE_CHARS and last_progress_line(log).endswith("…")
    assert last_progress_line(tmp_path / "missing.log") == ""


def test_each_running_step_has_a_line_until_it_ends(tmp_path):
    log = tmp_path / "pretrain.log"
    log.write_text("step 1,200/8,000 (15.0%) | loss 6.10 | ETA 5h 12m\n")
    out = io.StringIO()
    progress = StepProgress(0.05, out=out)
    with progress:
        progress.started("pre-training mlm, phase 1", log)
        progress.started("fine-tuning No NSP on sst2", tmp_path / "not-yet.log")
        deadline = time.monotonic() + 10
        while "not-yet" not in out.getvalue() and "nothing logged yet" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        progress.ended("fine-tuning No NSP on sst2")
        lines = progress.lines()
    assert lines == ["[table5] running 0m 00s: pre-training mlm, phase 1: step 1,200/8,000 (15.0%) | loss 6.10 | ETA 5h 12m"]
    assert "[table5] running 0m 00s: fine-tuning No NSP on sst2: (nothing logged yet)" in out.getvalue()
    assert (duration(59), duration(61), duration(3 * 3600 + 5 * 60)) == ("0m 59s", "1m 01s", "3h 05m")


def test_lines_said_from_threads_at_once_never_run_together():
    """Steps run in threads (--jobs) and the status thread prints too: print() writes a line and its
    newline separately, so two lines could run together and a line's start be lost to a parse
    (the smoke test lost "pre-training ltr ..." once). say() writes each line whole."""
    import threading
    import time

    from bert_ds.experiments.progress import say

    class SlowStream:  # switches threads inside every write, as a busy machine may
        def __init__(self):
            self.parts = []

        def write(self, text):
            time.sleep(0.0005)
            self.parts.append(text)

        def flush(self):
            pass

    out = SlowStream()
    expected = {f"[table5] step {t} line {k} ..." for t in range(6) for k in range(30)}
    threads = [threading.Thread(target=lambda t=t: [say(f"[table5] step {t} line {k} ...", out) for k in range(30)])
               for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = "".join(out.parts).splitlines()
    assert sorted(lines) == sorted(expected)
