"""Run by `verl_compat.pth` at interpreter start: install the finder and the warning filter (cheap)."""

from verl_compat._finder import install

install()
