"""Command line: the same engine jobs without an editor (SPEC 12). Exit codes: 0 ok, 1 error, 2 usage."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from . import __version__
from .errors import SaiplingError
from .project import Project, find_root

log = logging.getLogger("saipling")


def _setup_logging(verbose: int) -> None:
    level = os.environ.get("SAIPLING_LOG_LEVEL") or ("DEBUG" if verbose > 1 else "INFO" if verbose else "WARNING")
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")


def _root(root: str | None) -> Path:
    return Path(root).resolve() if root else find_root(Path.cwd())


def _open(root: str | None, **overrides: Any) -> Project:
    path = _root(root)
    if not path.is_dir():
        raise click.UsageError(f"not a folder: {path}")
    project = Project.open(path, overrides={k: v for k, v in overrides.items() if v is not None} or None)
    for w in project.warnings:
        click.echo(f"warning: {w}", err=True)
    return project


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SaiplingError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="saipling")
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """Semantic + keyword search over a markdown project."""
    _setup_logging(verbose)


provider_option = click.option(
    "--provider", type=click.Choice(["auto", "voyage", "openai", "local", "none"]), default=None,
    help="Embedding provider (default: from config, else auto).",
)  # fmt: skip


@main.command()
@click.argument("root", required=False, type=click.Path(file_okay=False))
@click.option("--full", is_flag=True, help="Re-read and re-chunk every file (embeddings still come from the cache).")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON summary on stdout.")
@provider_option
def index(root: str | None, full: bool, as_json: bool, provider: str | None) -> None:
    """Index ROOT (default: the nearest project above the current folder)."""
    from .cli_progress import IndexBar

    project = _open(root, provider=provider)
    try:
        with IndexBar(enabled=not as_json and sys.stderr.isatty() or os.environ.get("SAIPLING_PROGRESS") == "1") as bar:
            try:
                summary = project.index(full=full, progress=bar.update)
            except KeyboardInterrupt:
                click.echo("\ninterrupted: the index is consistent; run `saipling index` again to resume", err=True)
                sys.exit(130)
        if as_json:
            _emit_json(summary.to_json() | {"provider": project.provider.name, "model": project.provider.model})
            return
        s = summary
        click.echo(
            f"indexed {s.files} files, {s.chunks} chunks ({s.changed} changed, {s.unchanged} unchanged, "
            f"{s.deleted} removed) with {project.provider.name}"
            + (f"/{project.provider.model}" if project.provider.model else "")
        )
        click.echo(
            f"embedded {s.embedded} chunks, reused {s.reused} from cache, {s.tokens} tokens, "
            f"${s.cost_usd:.4f}, {s.seconds:.1f}s"
        )
        if s.skipped:
            click.echo(f"skipped {len(s.skipped)} files (use --json for the list)")
        if s.degraded:
            click.echo(f"warning: {s.degraded}", err=True)
    finally:
        project.close()


@main.command()
@click.argument("root", required=False, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(root: str | None, as_json: bool) -> None:
    """Show what is indexed, with which provider, and what it cost."""
    project = _open(root)
    try:
        st = project.status()
        if as_json:
            _emit_json(st)
            return
        click.echo(f"root:       {st['root']}")
        click.echo(f"files:      {st['totalFiles']}   chunks: {st['totalChunks']}   embedded: {st['embeddedChunks']}")
        click.echo(f"provider:   {st['provider']}" + (f" / {st['model']} ({st['dimensions']} dims)" if st["model"] else ""))
        click.echo(f"why:        {st['providerReason']}")
        click.echo(f"indexed:    {st['lastIndexed'] or 'never'}")
        click.echo(f"cost:       ${st['totalCostUsd']:.4f} so far; a full re-embed would cost ${st['estimatedReindexCostUsd']:.4f}")
        if st["degraded"]:
            click.echo(f"degraded:   {st['degraded']}")
    finally:
        project.close()


@main.command()
@click.argument("root", required=False, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@provider_option
def estimate(root: str | None, as_json: bool, provider: str | None) -> None:
    """Estimate what indexing would embed and cost, without calling the provider."""
    project = _open(root, provider=provider)
    try:
        est = project.estimate()
        if as_json:
            _emit_json(est)
            return
        click.echo(
            f"{est['files']} files; {est['chunksToEmbed']} chunks (~{est['tokensToEmbed']} tokens) to embed with "
            f"{est['provider']}{'/' + est['model'] if est['model'] else ''}: about ${est['estimatedCostUsd']:.4f}"
        )
    finally:
        project.close()


@main.command()
@click.argument("root", required=False, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def clear(root: str | None, as_json: bool) -> None:
    """Remove every file and chunk from the index (the embedding cache is kept)."""
    project = _open(root)
    try:
        project.clear()
        if as_json:
            _emit_json({"cleared": True, "root": str(project.root)})
        else:
            click.echo(f"cleared the index of {project.root}")
    finally:
        project.close()


@main.command()
@click.option("--tcp", default=None, help="Listen on HOST:PORT instead of stdio (debugging).")
def serve(tcp: str | None) -> None:
    """Run the language server on stdio (what editors start)."""
    from .lsp.server import run

    run(tcp=tcp)


if __name__ == "__main__":
    main()
