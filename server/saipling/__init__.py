"""saipling-search: semantic + keyword search over markdown projects."""

from __future__ import annotations

__version__ = "0.1.0"
