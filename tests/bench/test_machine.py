"""``trainmedic.bench.machine``: the host description a benchmark prints first."""

from __future__ import annotations

import json
import os

import torch

from trainmedic.bench.machine import describe_machine, usable_cores


def test_describe_reports_torch_and_usable_cores() -> None:
    m = describe_machine()
    assert m.torch == str(torch.__version__)
    assert m.torch_threads == torch.get_num_threads()
    assert m.cores_usable == usable_cores() == len(os.sched_getaffinity(0))
    assert len(m.cuda) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    line = m.one_line()
    assert line.startswith("machine: ") and f"torch {torch.__version__}" in line
    assert json.loads(json.dumps(m.to_dict()))["cores_usable"] == m.cores_usable
