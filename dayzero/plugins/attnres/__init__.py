from dayzero.plugins.attnres.op import attnres_mix, attnres_mix_blocks
from dayzero.plugins.attnres.reference import attnres_weights

__all__ = ["attnres_mix", "attnres_mix_blocks", "attnres_weights"]
