"""The built-in demo: a tiny character transformer trained on CPU with a real fault injected.

``run_demo(DemoConfig(fault="spike"))`` trains, records with the watcher and returns the run
directory; the CLI then diagnoses it. Importing this package does not import torch.
"""

from __future__ import annotations

from trainmedic.demo.runner import DEFAULT_STEPS, FAULTS, DemoConfig, run_demo

__all__ = ["DemoConfig", "run_demo", "FAULTS", "DEFAULT_STEPS"]
