"""What marks a line of a training console: terminal drawing, time stamps and logger
prefixes before the message, evaluation lines and bars (``line_side`` says whose a metric line
is), and lines that summarize the whole run rather than a step. Used by ``textlog``'s reader."""

from __future__ import annotations

import re

__all__ = ["TERMINAL", "STAMP", "VALID_LINE", "LEAD", "KERAS_COUNT", "RUN_SUMMARY", "EVAL_BAR",
           "ABSL_PREFIX", "LOGURU_PREFIX", "BRACKET_LEVEL_PREFIX", "SIDE_FIELD", "TEST_LINE",
           "SET_LINE", "VALID_METRIC", "LEAD_STEP", "line_side"]

#: What a terminal draws but a log does not mean: ANSI escape sequences (colours, cursor
#: moves) and backspaces (Keras' verbose=1 progress bar redrawing itself).
TERMINAL = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|\x08")
STAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T_]\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?|"
                   r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b|\[rank\d+\]:?|\brank\d+\b")
VALID_LINE = re.compile(r"valid(?:ation)? on\b|\bon '?valid|\b(?:valid|validation|eval|"
                        r"evaluation) (?:subset|set|results?|metrics)\b|^\s*(?:valid|"
                        r"validation|eval)\b\s*[:|]|^\s*(?:val|valid|validation|eval)\s+"
                        r"(?:epoch|step|iter(?:ation)?)\b|\b(?:validat|evaluat)(?:e|ing)\s+"
                        r"(?:epoch|step|iter(?:ation)?)\s*[:=]?\s*\d", re.I)
#: What a logger writes before the message (the stamp is already " | "): brackets, a level, a
#: logger's name, a rank ("2024-03-01 12:00:01,123 - INFO - Validation | step 50",
#: "INFO:root:Validation ...", "[rank0]: Validation ..."): a message that starts with a side
#: word is that side's.
LEAD = re.compile(r"(?:\[[^\]]{0,40}\]|[\s|:,\-\]\[]+|\b(?:INFO|DEBUG|WARNING|WARN|ERROR|"
                  r"CRITICAL)\b(?::[\w.]*:)?|\b[\w.]+(?=\s+-\s+(?:INFO|DEBUG|WARNING|ERROR)\b)|"
                  r"\brank\d+\b|\d+\b)+")
#: A Keras progress bar's count before its bar ("  32/100 [===>...", "32/100 ━━━━"), after
#: any terminal styling is gone.
KERAS_COUNT = re.compile(r"^\s*(\d+)/(\d+)\s*(?:\[[=>.]|[━─])")
#: Detectron2's last lines ("Overall training speed: 298 iterations in 0:00:03 (0.0117 s /
#: it)", "Total training time: 0:00:03 (0:00:00 on hooks)"): averages over the whole run, which
#: read as one step's time would shadow the per-step "time" column.
RUN_SUMMARY = re.compile(r"\b(?:Overall training speed|Total training time):", re.I)
EVAL_BAR = re.compile(r"\b(?:validat|evaluat|testing\b|test\b|predict|sanity)", re.I)
#: loguru's default line prefix ("2025-12-02 09:00:00.068 | INFO     | __main__:train_step:148
#: - "): its source location (module:function:line) holds numbers that are no metrics.
LOGURU_PREFIX = re.compile(r"^\s*\d{4}-\d{2}-\d{2} \d{1,2}:\d{2}:\d{2}(?:\.\d+)?\s*\|\s*[A-Z]+\s*\|"
                           r"\s*[\w.<>-]+:[\w.<>-]+:\d+\s+-\s")
#: A logger's prefix in brackets, its level last ("[2023-05-01 10:04:30,456 INFO] ", OpenNMT-py
#: and any "[%(asctime)s %(levelname)s] %(message)s" format): a metric right after it would
#: take the level as the first word of its name ("info_train_perplexity").
BRACKET_LEVEL_PREFIX = re.compile(r"^\s*\[[^\]]{0,60}?\b(?:INFO|DEBUG|WARNING|WARN|ERROR|"
                                  r"CRITICAL)\]\s*")
#: absl / glog's line prefix ("I0101 10:00:00.000000 140000 model_lib_v2.py:705] "): TF, JAX.
ABSL_PREFIX = re.compile(r"^[IWEF]\d{4}\s+\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\s+\d+\s+[\w.-]+:\d+\]\s?")
#: A side word standing alone as a field between separators ("epoch 1 | valid | loss=2.01",
#: "[Epoch 1] Valid | loss 2.01").
SIDE_FIELD = re.compile(r"(?:^|[|\]]|\s-)\s*(valid|validation|val|eval|evaluation|dev|test)\s*"
                        r"(?:\||\s-\s|$)", re.I)
TEST_LINE = re.compile(r"\s*test(?:ing)?\s+(?:epoch|step|iter(?:ation)?)\b", re.I)
SET_LINE = re.compile(r"^\W*(test|valid|validation|val|eval|dev)\s+set\s*:", re.I)
#: A message that opens with an evaluation's metric: OpenNMT-py's "Validation perplexity:
#: 181.27" (onmt/utils/report_manager.py), Megatron-LM's " validation loss at iteration 100 |
#: lm loss value: 6.2E+00 | lm loss PPL: ..." (evaluate_and_print_results), where the test
#: split says "... for test data" or "... on test set".
#: A step in a line's lead ("[step 250]", "[Iter 250]", "epoch: 3").
LEAD_STEP = re.compile(r"\b(step|iter(?:ation)?|it|epoch)\s*[:=#]?\s*(\d+)\b", re.I)
VALID_METRIC = re.compile(r"\s*(?:validation|valid|eval(?:uation)?)\s+(?:loss|perplexity|ppl|"
                          r"accuracy|acc|xent|nll)\b(?P<test>.*?\b(?:for test data|on test "
                          r"set)\b)?", re.I)


def line_side(text: str, eval_next: bool = False) -> tuple[str | None, str]:
    """``(side, text)`` of a metric line (its stamp already " | "): "valid" or "test" when the
    line is an evaluation's (``eval_next``: a notice before it announced one), else None; the
    text loses the words that said so where they would read as a name."""
    lead = LEAD.match(text)
    message = text[lead.end():] if lead else text
    side = "valid" if VALID_LINE.search(text) or eval_next or (
        lead and lead.end() and VALID_LINE.match(message)) else None
    if sm := SET_LINE.match(text):
        # the PyTorch MNIST example's "Test set: Average loss: 0.0331, Accuracy: ..."
        return ("test" if sm.group(1).lower() == "test" else "valid"), " | " + text[sm.end():]
    if side is None and (vm := VALID_METRIC.match(message)):
        # The lead's words would join the first key ("[... INFO]" -> "info_validation_...",
        # "[GPU0]" -> "gpu0_..."): only a step in it ("[step 250]", "[Iter 250]") is kept.
        sm = LEAD_STEP.search(text[:lead.end()]) if lead else None
        kept = f" | {sm.group(1)} {sm.group(2)} | " if sm else " | "
        return ("test" if vm.group("test") else "valid"), kept + message
    if side is None and TEST_LINE.match(message):
        return "test", text  # "Test Epoch: 3 Loss: 0.61" beside "Epoch: 3, Train Loss: 0.52"
    if side is None and (fm := SIDE_FIELD.search(text)):
        # "epoch 1 | valid | loss=2.01", "[Epoch 1] Valid | loss 2.01": the side as a field
        return ("test" if fm.group(1).lower() == "test" else "valid"), \
            text[:fm.start(1)] + text[fm.end(1):]
    return side, text
