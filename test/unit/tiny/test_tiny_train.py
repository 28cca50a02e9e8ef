"""The tiny-model trainer end to end at toy size: tokenizer, steps, checkpoint eval, resume, export.

Every step calls the trainer's ``main(argv)`` (what ``python -m sglang_pask.tiny.train ARGS`` runs)
in-process: a fresh interpreter costs ~15 s of imports per command, the toy work about a second."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT
from sglang_pask.tiny.train import main

TOY = ["--batch", "4", "--bucket", "2", "--hidden", "32", "--heads", "2", "--kv-heads", "1", "--ffn", "64",
       "--layers", "2", "--vocab", "700", "--tokenizer-examples", "120", "--eval-n", "1", "--eval-every", "4",
       "--log-every", "2", "--warmup", "2"]


def test_train_resume_export(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the trainer renders with models/tiny-random-qwen3's tokenizer, a relative path
    out = tmp_path / "run"
    main(["--out", str(out), "--steps", "4", *TOY])
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [rec["step"] for rec in log if "answer_loss" in rec] == [2, 4]
    assert [rec["step"] for rec in log if "calib_accuracy" in rec] == [4]
    assert (out / "loss.png").stat().st_size > 0 and (out / "state.pt").exists()

    # Resuming with a different config is refused (and so is fewer steps); a larger --steps extends
    # the run from step 4, recorded in the log and in the model card's reproduce line.
    with pytest.raises(SystemExit, match="different config"):
        main(["--out", str(out), "--steps", "6", *TOY, "--lr", "0.01", "--resume"])
    with pytest.raises(SystemExit, match="only a larger --steps"):
        main(["--out", str(out), "--steps", "2", *TOY, "--resume"])
    assert json.loads((out / "config.json").read_text())["steps"] == 4
    main(["--out", str(out), "--steps", "6", *TOY, "--resume"])
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [rec["step"] for rec in log if "answer_loss" in rec] == [2, 4, 6]
    assert [rec["step"] for rec in log if "calib_accuracy" in rec] == [4, 6]
    assert {"extend_steps": [4, 6]} in log and json.loads((out / "config.json").read_text())["steps"] == 6

    dest = tmp_path / "model"
    results = tmp_path / "results"
    main(["--out", str(out), "--export", str(dest), "--results", str(results)])
    assert (results / "model-train-log.jsonl").read_text() == (out / "log.jsonl").read_text()
    assert (results / "model-loss.png").read_bytes() == (out / "loss.png").read_bytes()
    card = (dest / "MODEL_CARD.md").read_text()
    assert "6 steps of batch 4" in card and "is **not** a general assistant" in card
    assert "--steps 4`, then `... --out runs/tiny-fc --resume --steps 6`" in card
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok, m = AutoTokenizer.from_pretrained(str(dest)), AutoModelForCausalLM.from_pretrained(str(dest))
    tools = [{"type": "function", "function": {"name": "f"}}]
    text = tok.apply_chat_template([{"role": "user", "content": "x"}], tools=tools, tokenize=False)
    assert text.startswith("<|im_start|>system\n# Tools\n<tools>\n{") and m.config.num_hidden_layers == 2
