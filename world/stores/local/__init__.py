"""`LocalWorld`: the world as files under one data directory (the layout: `layout`)."""

from .layout import default_data_dir
from .world import LocalWorld

__all__ = ["LocalWorld", "default_data_dir"]
