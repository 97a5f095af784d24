"""The compact groups a layer's states can live on, by name: ``AttentionConfig.group`` picks one.

A group is a module implementing ``base.Geometry``, with its literal T × T reference beside it (``naive*.py``);
registering it is one line here. The layer and the model never name one.
"""

from kuramoto_attention.layers.groups.base import Geometry
from kuramoto_attention.layers.groups.sphere import Sphere
from kuramoto_attention.layers.groups.su2 import SU2
from kuramoto_attention.layers.groups.torus import Torus

GEOMETRIES: dict[str, type[Geometry]] = {"torus": Torus, "su2": SU2, "sphere": Sphere}  # sphere: S³ ⊂ R⁴


def build_geometry(group: str) -> Geometry:
    """The geometry named ``group`` (one object serves every layer of a model)."""
    if group not in GEOMETRIES:
        raise ValueError(f"group must be one of {tuple(GEOMETRIES)}, got {group!r}")
    return GEOMETRIES[group]()
