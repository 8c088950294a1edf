"""`dayzero cache ls | verify | gc`: look at, check and trim the compilation cache."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from dayzero.cache.entry import Entry
from dayzero.cache.gc import tree_bytes
from dayzero.cache.store import CompilationCache

SUMMARY_FIELDS = ("model", "backend", "world_size", "options")


@click.group("cache")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Cache directory (default: $DAYZERO_CACHE_DIR/engines, else ~/.cache/dayzero/engines).")
@click.pass_context
def cache_group(ctx: click.Context, root: Path | None) -> None:
    """The compilation cache of exported engines."""
    ctx.obj = CompilationCache(root)


@cache_group.command("ls")
@click.pass_obj
def ls(cache: CompilationCache) -> None:
    """One line per entry: key prefix, size, created, status (fast check), metadata summary."""
    listed = cache.entries()
    click.echo(f"{len(listed)} entries in {cache.root}")
    for key, result in listed:
        size = _human_bytes(tree_bytes(cache.root / key))
        if isinstance(result, Entry):
            click.echo(f"{key[:12]}  {size:>9}  {result.created}  ok   {_summary(result.meta)}")
        else:
            click.echo(f"{key[:12]}  {size:>9}  {'?':25}  bad  {result}")


@cache_group.command()
@click.pass_obj
def verify(cache: CompilationCache) -> None:
    """Rehash every file of every entry; print each bad entry and why; exit status 1 if any is bad."""
    bad = cache.verify(deep=True)
    for key, problem in bad:
        click.echo(f"bad {key}: {problem}")
    click.echo(f"{len(cache.keys())} entries checked, {len(bad)} bad")
    if bad:
        sys.exit(1)


@cache_group.command()
@click.option("--dry-run", is_flag=True, help="List what would go; remove nothing.")
@click.option("--older-than-days", type=float, default=None, help="Also remove entries not used for N days.")
@click.option("--max-size-gb", type=float, default=None, help="Also remove least recently used entries to fit.")
@click.pass_obj
def gc(cache: CompilationCache, dry_run: bool, older_than_days: float | None, max_size_gb: float | None) -> None:
    """Remove dead builds, bad entries, stale locks, and optionally old or excess entries."""
    max_bytes = None if max_size_gb is None else int(max_size_gb * (1 << 30))
    removed = cache.gc(older_than_days, max_bytes, dry_run)
    verb = "would remove" if dry_run else "removed"
    for item in removed:
        click.echo(f"{verb} {item.path} ({item.reason}, {_human_bytes(item.num_bytes)})")
    click.echo(f"{verb} {len(removed)} items, {_human_bytes(sum(item.num_bytes for item in removed))}")


def _summary(meta: dict) -> str:
    fields = [(name, meta[name]) for name in SUMMARY_FIELDS if name in meta]
    return " ".join(f"{name}={json.dumps(value, sort_keys=True, separators=(',', ':'))}" for name, value in fields)


def _human_bytes(num_bytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if num_bytes < 1024 or unit == "GiB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    raise AssertionError("unreachable")
