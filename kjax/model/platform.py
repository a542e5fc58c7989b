"""Moved to kjax.config.platform (one module names platforms and the target
a program is traced for); this name goes once no module imports it."""
from kjax.config.platform import lowering_for, normalize, platform  # noqa: F401
