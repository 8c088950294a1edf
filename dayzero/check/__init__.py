"""`dayzero check`: a checkpoint through transformers' implementation and through dayzero, compared."""

from dayzero.check.options import CheckOptions
from dayzero.check.report import CheckReport
from dayzero.check.run import run_check

__all__ = ["CheckOptions", "CheckReport", "run_check"]
