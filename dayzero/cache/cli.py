"""`dayzero cache ls | verify | gc`."""

from __future__ import annotations

import sys
import time

import click

from dayzero.cache.gc import collect
from dayzero.cache.store import CompilationCache, Entry


def _summary(entry: Entry) -> str:
    meta = entry.meta or {}
    parts = [str(meta[k]) for k in ("model", "backend") if k in meta]
    parts += [f"{k}={v}" for k, v in sorted((meta.get("options") or {}).items())]
    return " ".join(parts)


@click.group("cache")
def cache_group() -> None:
    """The compilation cache of built engines ($DAYZERO_CACHE_DIR/engines)."""


@cache_group.command("ls")
def ls() -> None:
    """One line per entry: key, size, age, what it holds, status."""
    cache = CompilationCache()
    entries = cache.entries(deep=False)
    if not entries:
        click.echo(f"no entries in {cache.root}")
    for key, entry in entries:
        if isinstance(entry, str):
            click.echo(f"{key[:16]}  {'-':>9}  {'-':>8}  BAD: {entry}")
            continue
        age_h = (time.time() - entry.created) / 3600
        click.echo(f"{key[:16]}  {entry.size / 2**20:7.1f}MB  {age_h:6.1f}h  {_summary(entry)}  ok")


@cache_group.command("verify")
def verify() -> None:
    """Check every entry's files against its checksums; exit status 1 when any entry is bad."""
    cache = CompilationCache()
    bad = cache.verify(deep=True)
    for key, problem in bad:
        click.echo(f"BAD {key[:16]}: {problem} (the next export of it rebuilds it; `dayzero cache gc` removes it)")
    click.echo(f"{len(cache.keys()) - len(bad)} good, {len(bad)} bad entries in {cache.root}")
    if bad:
        sys.exit(1)


@cache_group.command("gc")
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option("--older-than-days", type=float, default=None, help="Also remove entries unused for this long.")
@click.option("--max-size-gb", type=float, default=None, help="Also remove least recently used entries beyond this.")
def gc(dry_run: bool, older_than_days: float | None, max_size_gb: float | None) -> None:
    """Remove leftovers of dead builders, bad entries and (optionally) old or excess entries."""
    limit = None if max_size_gb is None else int(max_size_gb * 2**30)
    removed = collect(CompilationCache(), dry_run, older_than_days, limit)
    for line in removed:
        click.echo(("would remove " if dry_run else "removed ") + line)
    click.echo(f"{len(removed)} {'removable' if dry_run else 'removed'}")
