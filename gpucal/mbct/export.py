"""The rule export's former home: it moved to :mod:`gpucal.rules` (MBCT, HC and the tree plots share it).

Kept until its importers read :mod:`gpucal.rules` directly.
"""

from gpucal.rules import (
    EXPORT_FORMATS,
    RULES_FORMAT,
    RULES_VERSION,
    condition_text,
    describe_features,
    export_rules,
    map_text,
    node_children,
    sql_float,
    sql_ident,
    sql_value,
    stop_codes,
    weight_text,
)

__all__ = [
    "EXPORT_FORMATS",
    "RULES_FORMAT",
    "RULES_VERSION",
    "condition_text",
    "describe_features",
    "export_rules",
    "map_text",
    "node_children",
    "sql_float",
    "sql_ident",
    "sql_value",
    "stop_codes",
    "weight_text",
]
