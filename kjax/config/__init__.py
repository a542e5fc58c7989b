"""The one config tree of every verb (MaxText style), written as Python files
in `tpu_configs/` (big_vision style: `get_config()` returns the tree, usually
`defaults()` with the keys it changes).

    schema.py     every key: default, type, allowed values, one-line meaning
    load.py       files and `--config.KEY=VALUE` overrides (ml_collections'
                  config_flags), one-line errors naming FILE:LINE or the key
    validate.py   types and ranges, then section by section
    recorded.py   the config a workdir records (WORKDIR/kjax_config.py)
    presets.py    builders the preset files share

Checks that need the input-mode and objective registries run in
`kjax.objectives.check_config` (a higher layer).
"""
from kjax.config.load import (ConfigDict, apply_override, apply_overrides, defaults,
                              load_config, preset_dirs, resolve_config_path)
from kjax.config.schema import SCHEMA, Key, leaves
from kjax.config.validate import knowledge_enabled, shaking_enabled, validate

__all__ = ["ConfigDict", "SCHEMA", "Key", "apply_override", "apply_overrides", "defaults",
           "knowledge_enabled", "leaves", "load_config", "preset_dirs", "resolve_config_path",
           "shaking_enabled", "validate"]
