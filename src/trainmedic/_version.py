"""The package's version, in a leaf module: any part can read it without importing the
top-level package (whose lazy names point back into the parts)."""

from __future__ import annotations

__version__ = "0.1.0"
