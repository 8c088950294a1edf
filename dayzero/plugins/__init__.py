"""Plugin ops: one folder per op, each with reference.py (the spec); the model calls ops only through here."""
