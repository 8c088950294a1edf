from dayzero.plugins.attnres.reference import attnres_mix

__all__ = ["attnres_mix"]
