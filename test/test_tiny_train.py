"""The tiny-model trainer end to end at toy size: tokenizer, steps, checkpoint eval, resume, export."""

from __future__ import annotations

import json

from conftest import run_python

TOY = ["--batch", "4", "--bucket", "2", "--hidden", "32", "--heads", "2", "--kv-heads", "1", "--ffn", "64",
       "--layers", "2", "--vocab", "700", "--tokenizer-examples", "120", "--eval-n", "2", "--eval-every", "4",
       "--log-every", "2", "--warmup", "2"]


def test_train_resume_export(tmp_path):
    out = tmp_path / "run"
    r = run_python("-m", "sglang_pask.tiny.train", "--out", str(out), "--steps", "4", *TOY, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [rec["step"] for rec in log if "answer_loss" in rec] == [2, 4]
    assert [rec["step"] for rec in log if "calib_accuracy" in rec] == [4]
    assert (out / "loss.png").stat().st_size > 0 and (out / "state.pt").exists()

    # Resuming with a different config is refused (and so is fewer steps); a larger --steps extends
    # the run from step 4, recorded in the log and in the model card's reproduce line.
    r = run_python("-m", "sglang_pask.tiny.train", "--out", str(out), "--steps", "6", *TOY, "--lr", "0.01", "--resume",
                   timeout=300)
    assert r.returncode != 0 and "different config" in r.stderr
    r = run_python("-m", "sglang_pask.tiny.train", "--out", str(out), "--steps", "2", *TOY, "--resume", timeout=300)
    assert r.returncode != 0 and "only a larger --steps" in r.stderr
    assert json.loads((out / "config.json").read_text())["steps"] == 4
    r = run_python("-m", "sglang_pask.tiny.train", "--out", str(out), "--steps", "6", *TOY, "--resume", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [rec["step"] for rec in log if "answer_loss" in rec] == [2, 4, 6]
    assert {"extend_steps": [4, 6]} in log and json.loads((out / "config.json").read_text())["steps"] == 6

    dest = tmp_path / "model"
    results = tmp_path / "results"
    r = run_python("-m", "sglang_pask.tiny.train", "--out", str(out), "--export", str(dest),
                   "--results", str(results), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (results / "model-train-log.jsonl").read_text() == (out / "log.jsonl").read_text()
    assert (results / "model-loss.png").read_bytes() == (out / "loss.png").read_bytes()
    card = (dest / "MODEL_CARD.md").read_text()
    assert "6 steps of batch 4" in card and "is **not** a general assistant" in card
    assert "--steps 4`, then `... --out runs/tiny-fc --resume --steps 6`" in card
    code = (
        "import sys; from transformers import AutoTokenizer, AutoModelForCausalLM\n"
        f"tok = AutoTokenizer.from_pretrained({str(dest)!r}); m = AutoModelForCausalLM.from_pretrained({str(dest)!r})\n"
        "tools = [{'type': 'function', 'function': {'name': 'f'}}]\n"
        "text = tok.apply_chat_template([{'role': 'user', 'content': 'x'}], tools=tools, tokenize=False)\n"
        "assert text.startswith('<|im_start|>system\\n# Tools\\n<tools>\\n{') and m.config.num_hidden_layers == 2\n"
        "print('ok')\n"
    )
    r = run_python("-c", code)
    assert r.stdout.strip().endswith("ok"), r.stderr[-2000:]
