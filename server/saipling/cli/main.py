"""Command line: the same engine jobs without an editor (SPEC 12). Exit codes: 0 ok, 1 error, 2 usage."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from .. import __version__, redact
from ..config.settings import LOG_LEVEL_ENV, MAX_CHAPTER, log_level
from ..errors import InvalidRequest, SaiplingError, StorageFull
from ..paths import from_cwd, root_relative_prefix, too_broad
from ..project import Project, find_root
from .shown import PrintableFormatter, printable, printable_json, printable_name

log = logging.getLogger("saipling")


class NumberRange(click.FloatRange):
    """click.FloatRange that refuses `nan` (no comparison holds for it, so the range let it through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number != number:
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


def echo(message: str = "", err: bool = False) -> None:
    """click.echo of readable output: control characters from the project's text shown escaped (cli/shown.py)."""
    click.echo(printable(message), err=err)


def _setup_logging(verbose: int) -> None:
    default = "DEBUG" if verbose > 1 else "INFO" if verbose else "WARNING"
    # (any case: `debug` was a ValueError traceback from every command; an unknown value is told once, not fatal)
    chosen, problem = log_level(os.environ.get(LOG_LEVEL_ENV), default)
    if problem:
        echo(f"warning: {problem}", err=True)
    level = chosen or default
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    # (a log line may quote a file's name or text: printable. Without -v a warning reads as the CLI's own do,
    # `warning: ...`; -v adds the logger's name)
    named = bool(verbose) or (bool(chosen) and not problem)
    fmt = "%(levelname)s %(name)s: %(message)s" if named else None
    for handler in logging.getLogger().handlers:
        handler.setFormatter(PrintableFormatter(fmt))
    # (markdown-it's DEBUG traces every parser rule of every block)
    logging.getLogger("markdown_it").setLevel(logging.INFO)
    # (the settings' warnings are printed by `_open` as `warning: ...`, with the project's others: not twice)
    if not named:
        logging.getLogger("saipling.config.settings").setLevel(logging.ERROR)
    redact.remember(os.environ.get("OPENAI_API_KEY"), os.environ.get("VOYAGE_API_KEY"))
    redact.install()  # API keys never reach a log line, at any level


def _root(root: str | None) -> Path:
    """The project's folder, resolved; the path it was named by is remembered (`remember_spelling`): a folder
    reached through a link (`PROJECT/notes` -> elsewhere) keeps the exclusions of the project it is linked into.
    Without a root, the shell's working folder as it spells it ($PWD, when it names the working folder)."""
    from ..files.context_settings import remember_spelling

    if root:
        found = Path(root).resolve()
        remember_spelling(found, Path(root))
        return found
    cwd = Path.cwd()
    found = find_root(cwd)
    logical = os.environ.get("PWD")
    if found == cwd.resolve() and logical and os.path.isabs(logical):
        try:
            if os.path.samefile(logical, cwd):
                remember_spelling(found, Path(logical))
        except OSError:
            pass
    return found


def _open(
    root: str | None, create: bool = False, embeds: bool = True, enclosing: bool = False, **overrides: Any
) -> Project:
    """Open the project; only commands that index (create=True) may create `.saipling/`. `embeds=False`: the
    command never embeds (a lexical search, `get`), so no provider is built (the local one costs ~8 ms to set up).
    Commands that only read close with `checkpoint=False` (IndexStore.close): a one-shot search leaves its log row in
    the WAL for the next writer instead of syncing the database file at exit.

    `enclosing` (commands that read): a `--root` inside an indexed project, with no index of its own, opens that
    project, as running the command from that folder does (`find_root`), and says so; it was read as a new, empty
    project whose advice was to index the folder again, nested (a path given relative to that folder is still
    found: `_located`)."""
    path = _root(root)
    if not path.is_dir():
        raise click.UsageError(f"not a folder: {path}")
    if enclosing and root is not None and (outer := find_root(path)) != path:
        rel = path.relative_to(outer).as_posix()
        echo(
            f"note: {path} is inside the project at {outer}: reading its index (--path {rel} keeps to this folder)",
            err=True,
        )
        path = outer
    if create and (why := too_broad(path, explicit=root is not None)):
        raise click.UsageError(why)
    layers = {k: v for k, v in overrides.items() if v is not None} or None
    provider = None
    if not embeds:
        from ..embeddings.base import NoneProvider

        # (Project.indexer builds the configured provider if a stale file must be read again)
        provider = NoneProvider(reason="not needed: this command embeds nothing", placeholder=True)
    # only indexing verifies every page of the index (and rebuilds a corrupted one); a read skips that cost
    project = Project.open(path, overrides=layers, create=create, verify=create, provider=provider)
    for w in project.warnings:
        echo(f"warning: {w}", err=True)
    return project


def _located(project: Project, root: str | None, path: str) -> str:
    """A path argument as the project reads it (`from_cwd`); one given relative to the folder `--root` named
    inside the project (`_open`'s `enclosing`), when the root has no such file, as that folder's file."""
    found = from_cwd(project.root, path)
    named = _root(root)
    if found == path and named != project.root and not os.path.isabs(path) and not path.startswith("file://"):
        if not os.path.lexists(project.root / path) and os.path.lexists(named / path):
            return str(named / path)
    return found


def _freshen(project: Project) -> None:
    """Before a read that searches (search, related, enrich): files edited, added, renamed or deleted since the last
    `saipling index` are re-read (their text; `index` embeds them), and an empty index is said to be one."""
    from ..live.freshness import refresh_before_reading

    if note := refresh_before_reading(project):
        echo(f"note: {note}", err=True)


def _one_blas_thread() -> None:
    """A one-shot search loads numpy for one query: OpenBLAS started with one thread costs ~20 ms less CPU (row S29).
    Its only big BLAS call is the exact float product of an index under 64M floats (55k x 384: min 24 ms on one
    thread, 16 ms on two, at load 11), which a second thread shortens on a quiet machine only; the answers are the
    same. Set only before numpy is imported, only where the user has not set it, in this process (the servers keep
    the default: storage.vector_matrix.set_blas_threads_for chooses per product)."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _emit_json(data: Any) -> None:
    click.echo(printable_json(json.dumps(data, indent=2, ensure_ascii=False, default=str)))


class _RootCommand(click.Command):
    """A command that takes its project as --root, not as an argument (as `index ROOT` and `status ROOT` do): an
    extra argument that is an existing folder gets a hint to give it as --root (`saipling search fireball vault`).
    `folder_hint` says what --root would do, in the command's words ("to search in a folder")."""

    def __init__(self, *args: Any, folder_hint: str = "to search in a folder", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.folder_hint = folder_hint

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        allowed, ctx.allow_extra_args = ctx.allow_extra_args, True  # (to see the extras; refused below as click does)
        try:
            rest = super().parse_args(ctx, args)
        finally:
            ctx.allow_extra_args = allowed
        if rest and not allowed and not ctx.resilient_parsing:
            import shlex

            extra = "s" if len(rest) > 1 else ""
            message = f"Got unexpected extra argument{extra} ({' '.join(rest)})"
            folder = next((a for a in rest if os.path.isdir(a)), None)
            if folder is not None and ctx.params.get("root") is None:
                message += f"\n{self.folder_hint[0].upper()}{self.folder_hint[1:]}, use --root {shlex.quote(folder)}"
            ctx.fail(message)
        return rest


class _QueryCommand(_RootCommand):
    """A command whose QUERY argument may itself start with "-": an unknown option that is not close to a real one
    gets a hint to put `--` before the query (`saipling search -- "--max-old-space-size"`); one that is close
    (`--roots`) is a typo, and only the option it is close to is offered."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # (the parser consumes `args`: `-foo` was shown as the `-f` left of it)
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            if exc.possibilities:  # a typo of a real option: did-you-mean first, no `--` tip to mislead
                *most, last = exc.possibilities  # (closest first)
                close = f"{', '.join(most)} or {last}" if most else last
                raise click.NoSuchOption(
                    exc.option_name, message=f"{exc.message} Did you mean {close}?", ctx=exc.ctx
                ) from None
            import shlex

            word = next((a for a in given if a.startswith("-") and a.split("=")[0].startswith(exc.option_name)), None)
            shown = word or exc.option_name
            exc.message = (
                f"{exc.message}\nA query that starts with '-'? Put -- before it: "
                f"saipling {self.name} -- {shlex.quote(shown)}"
            )
            raise


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except InvalidRequest as exc:
            echo(f"error: {exc}", err=True)
            ctx.exit(2)
        except SaiplingError as exc:
            echo(f"error: {exc}", err=True)
            ctx.exit(1)
        except BrokenPipeError:  # the reader stopped early (`saipling search x | head`): end quietly
            # (stdout to /dev/null: nothing left to flush at exit; exit 1, as rich does for the tables)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(1)
        except OSError as exc:
            echo(f"error: {type(exc).__name__}: {exc}", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="saipling")
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """Semantic + keyword search over a markdown project."""
    _setup_logging(verbose)


provider_option = click.option(
    "--provider",
    type=click.Choice(["auto", "voyage", "openai", "local", "none"]),
    default=None,
    help="Embedding provider (default: from config, else auto).",
)


@main.command()
@click.argument("root", required=False, type=click.Path(file_okay=False))
@click.option(
    "--full",
    is_flag=True,
    help="Re-read and re-chunk every file (embeddings still come from the cache); on a shared PostgreSQL workspace, "
    "also make it this copy's (files it lacks are dropped for everyone).",
)
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON summary on stdout.")
@click.option("--yes", "-y", is_flag=True, help="Embed without asking, whatever a paid provider's estimate says.")
@click.option(
    "--no-wait",
    is_flag=True,
    help="Fail at once when another process is indexing this project (default: wait).",
)
@provider_option
def index(root: str | None, full: bool, as_json: bool, yes: bool, no_wait: bool, provider: str | None) -> None:
    """Index ROOT (default: the nearest project above the current folder). Exits 1 when files failed.

    Every file is made keyword-searchable first, then embedded. With a paid provider, when the estimate is
    over `confirmCostAboveUsd` (default $0.10), the estimate is printed and the CLI asks before embedding
    (unless --yes); answering no keeps the keyword index. Another process indexing the project is waited for."""
    from .progress import IndexBar

    project = _open(root, create=True, provider=provider)
    project.indexer.on_lock_wait = lambda pid: echo(
        f"waiting: the index is in use by {f'PID {pid}' if pid else 'another process'}", err=True
    )
    try:
        with IndexBar(enabled=not as_json and sys.stderr.isatty() or os.environ.get("SAIPLING_PROGRESS") == "1") as bar:

            def confirm(est: dict[str, Any]) -> bool:
                if yes:
                    return True
                bar.pause()
                echo(
                    f"Embedding {est['chunks']:,} chunks of {est['files']:,} files (~{est['tokens']:,} tokens) "
                    f"with {est['provider']}/{est['model']} costs about ${est['costUsd']:.2f}.",
                    err=True,
                )
                try:
                    answer = click.confirm("Embed them now?", default=False, err=True)
                except click.Abort:  # no answer (stdin closed): no money spent
                    answer = False
                bar.resume()
                return answer

            opened = _index_file_identity(project)
            try:
                summary = project.index(full=full, progress=bar.update, confirm=confirm, wait=not no_wait, claim=full)
            except StorageFull as exc:  # a write of the run itself (not one file's): where, and how much room
                from ..storage import disk_full_advice

                echo(f"error: {exc}", err=True)
                echo(f"error: {disk_full_advice(project.root, project.store.path, project.settings)}", err=True)
                raise SystemExit(1) from None
            except KeyboardInterrupt:
                st = project.status()
                echo(
                    f"\ninterrupted: the index is consistent ({st['pendingFiles']} files not read yet, "
                    f"{st['unembeddedChunks']} chunks not embedded yet); run `saipling index` again to resume",
                    err=True,
                )
                sys.exit(130)
        if opened not in (None, (0, 0)) and _index_file_identity(project) != opened:
            echo(
                f"error: the index {project.store.path} was deleted or replaced while this run wrote it: what the run "
                "did is not on disk; run `saipling index` again",
                err=True,
            )
            raise SystemExit(1)
        if as_json:
            _emit_json(summary.to_json() | {"provider": project.provider.name, "model": project.provider.model})
            _report_failures(summary, project)
            return
        s = summary
        echo(
            f"indexed {_count(s.files, 'file')}, {_count(s.chunks, 'chunk')} ({s.changed} changed, {s.unchanged} "
            f"unchanged, {s.deleted} removed) with {project.provider.name}"
            + (f"/{project.provider.model}" if project.provider.model else "")
        )
        echo(
            f"embedded {_count(s.embedded, 'chunk')}, reused {s.reused} from cache, {_count(s.tokens, 'token')}, "
            f"${s.cost_usd:.4f}, {s.seconds:.1f}s"
        )
        if could_not := s.could_not_index():  # (failures are reported below, one line per cause)
            echo(_could_not_index_line(could_not))
        if s.degraded:
            echo(f"warning: {s.degraded}", err=True)
        if s.declined:
            echo(
                f"not embedded: {s.unembedded} chunks are keyword-searchable only; run `saipling index --yes` "
                "to embed them",
                err=True,
            )
        if project.fallback_from is not None:
            echo(f"note: {project.provider.reason}; the next `saipling index` tries it again", err=True)
        _report_failures(summary, project)
    finally:
        project.close()


def _index_file_identity(project: Project) -> tuple[int, int] | None:
    """(device, inode) of the project's SQLite index file, None for another store or none on disk: a run whose
    file was deleted (`rm -rf .saipling` meanwhile) writes to an unlinked file and would report success."""
    path = getattr(project.store, "path", None)
    if not isinstance(path, (str, Path)) or str(path) == ":memory:" or "://" in str(path):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0)
    return (st.st_dev, st.st_ino)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _could_not_index_line(files: list[tuple[str, str]]) -> str:
    """Files that would have been indexed but could not be: one is named, more are counted by reason."""
    if len(files) == 1:
        path, reason = files[0]
        return f"could not index 1 file: {path} ({reason})"
    kinds: dict[str, int] = {}
    for _, reason in files:
        kind = reason.split(" (")[0]  # "too large (6000000 bytes > ...)" -> "too large"
        kinds[kind] = kinds.get(kind, 0) + 1
    counted = ", ".join(f"{n:,} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    return f"could not index {_plural(len(files), 'file')} ({counted}; --json lists them)"


_NO_ROOM = ("FullError", "disk is full", "No space left", "Errno 28", "Disk quota exceeded")


def _report_failures(summary: Any, project: Project) -> None:
    """Files an error kept out of the index: one line per cause on stderr, and exit 1. A full disk also says
    where, what is free and about how much room the index needs."""
    causes = summary.failure_causes()
    if not causes:
        return
    for cause, n in causes.items():
        echo(f"error: {n} file{'s' if n != 1 else ''} could not be indexed: {cause}", err=True)
    if any(word in cause for cause in causes for word in _NO_ROOM):
        from ..storage import disk_full_advice

        echo(f"error: {disk_full_advice(project.root, project.store.path, project.settings)}", err=True)
    raise SystemExit(1)


@main.command()
@click.argument("root", required=False, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(root: str | None, as_json: bool) -> None:
    """Show what is indexed, with which provider, and what it cost."""
    project = _open(root, enclosing=True)
    try:
        st = project.status()
        if st["totalFiles"]:  # files edited, added or deleted since the last index: text not read yet
            from ..live.freshness import changed_on_disk

            st["pendingFiles"] = max(st["pendingFiles"], len(changed_on_disk(project)))
        if as_json:
            _emit_json(st)
            return
        echo(f"root:       {st['root']}")
        echo(f"version:    saipling {st['version']}")
        echo(
            f"files:      {st['totalFiles']}   chunks: {st['totalChunks']}   embedded: {st['embeddedChunks']}"
            + (f"   without vectors: {st['unembeddedChunks']}" if st["unembeddedChunks"] else "")
        )
        echo(
            f"provider:   {st['provider']}"
            + (f" / {st['model']} ({st['dimensions'] or '?'} dims)" if st["model"] else "")
        )
        echo(f"why:        {st['providerReason']}")
        if st.get("embedding"):
            echo(f"texts:      {_embedding_line(st['embedding'])}")
            if st["embedding"].get("languages"):
                echo(f"languages:  {LANGUAGE_LINES.get(st['embedding']['languages'], st['embedding']['languages'])}")
        if st.get("fallbackFrom"):
            fb = st["fallbackFrom"]
            echo(f"fallback:   standing in for {fb['provider']}/{fb['model']} until it works ({fb['reason']})")
        if st.get("lastRun"):
            run = st["lastRun"]
            took = f", took {run['seconds']:.1f} s" if run.get("seconds") is not None else ""
            echo(f"last run:   finished {_local_time(run['finished'])}{took}")
        else:
            echo(f"indexed:    {_local_time(st['lastIndexed']) if st['lastIndexed'] else 'never'}")
        if st.get("store") == "postgresql":
            echo(f"store:      {st['indexPath']} (shared workspace)")
        elif st.get("indexBytes") is not None:
            echo(f"on disk:    {_size(st['indexBytes'])} ({st['indexPath']})")
        if st["pendingFiles"] or st["unembeddedChunks"]:
            echo(
                f"left:       {st['pendingFiles']} files not read yet, {st['unembeddedChunks']} chunks not "
                "embedded yet (`saipling index` finishes them)"
            )
        echo(
            f"cost:       ${st['totalCostUsd']:.4f} so far; a full re-embed would cost "
            f"${st['estimatedReindexCostUsd']:.4f}"
        )
        if st.get("excludedFiles"):
            n = st["excludedFiles"]
            echo(f"excluded:   {n} file{'s' if n != 1 else ''} (.context_settings.json; `--all-files` reads them)")
        if st["degraded"]:
            echo(f"degraded:   {st['degraded']}")
        if st["readOnly"]:
            echo("read-only:  the index cannot be written (search and status only)")
        for w in st["warnings"]:
            if w not in project.warnings:  # (those `_open` printed already)
                echo(f"warning:    {w}")
    finally:
        project.close(checkpoint=False)


def _local_time(iso: str) -> str:
    """An ISO UTC time as this machine's local time, to the second, with its zone."""
    import datetime as dt

    return dt.datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


LANGUAGE_LINES = {
    "en": "English only: other languages are found by their words (docs/providers.md: a multilingual model)",
    "multilingual": "multilingual: finds passages by meaning in many languages",
}


def _embedding_line(e: dict) -> str:
    """How texts are sent to the model: prefixes, input-type field, window, batch size (status)."""
    parts = [f"query prefix {e['queryPrefix']!r}", f"document prefix {e['documentPrefix']!r}"]
    if e.get("inputTypeField"):
        parts.append(f"{e['inputTypeField']} = query/document")
    parts += [f"window {e['maxInputTokens']} tokens", f"batches of {e['batchSize']}"]
    if e.get("pooling") == "cls":
        parts.append("[CLS] pooling")
    return ", ".join(parts) + (f" ({e['family']} family)" if e.get("family") else "")


@main.command(cls=_QueryCommand)
@click.argument("name")
@click.option("--root", type=click.Path(file_okay=False), default=None, help="Project root.")
@click.option(
    "--max-chapter", type=click.IntRange(0, MAX_CHAPTER), default=None, help="Spoiler horizon: nothing after chapter N."
)
@click.option(
    "--limit",
    type=click.IntRange(0, 100_000),
    default=None,
    help="Single mentions listed with --json (default 200; 0: only counts).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def mentions(name: str, root: str | None, max_chapter: int | None, limit: int | None, as_json: bool) -> None:
    """Where a character or place NAME (a name, alias or profile path) is mentioned: per chapter counts, first and
    last appearance, chapters since last seen."""
    from ..retrieval import mentions as mentions_mod

    project = _open(root, embeds=False, enclosing=True)
    try:
        _freshen(project)
        found = mentions_mod.request(project, {"name": name, "maxChapter": max_chapter, "limit": limit})
    finally:
        project.close(checkpoint=False)
    if as_json:
        _emit_json(found)
        return
    for e in found["entities"]:
        echo(f"{e['entity']['name']} ({printable_name(e['entity']['path'])})")
        echo(f"  {e['summary']}")
        if e["chapters"]:
            echo(f"  {'chapter':<24} {'mentions':>8}  first")
        for c in e["chapters"]:
            echo(f"  {c['chapter']:<24} {c['count']:>8}  {printable_name(c['first']['path'])}:{c['first']['line']}")
        for f in e["otherFiles"]:
            echo(f"  {'(not a chapter)':<24} {f['count']:>8}  {printable_name(f['path'])}")


@main.command(cls=_RootCommand, folder_hint="to check the names in a folder")
@click.option("--root", type=click.Path(file_okay=False), default=None, help="Project root.")
@click.option("--drift", is_flag=True, help="Words close to an entity's name or alias but not equal.")
@click.option("--unknown", is_flag=True, help="Capitalised names used often with no entity page.")
@click.option(
    "--min-count", type=click.IntRange(1), default=5, show_default=True, help="--unknown: mid-sentence uses needed."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def names(root: str | None, drift: bool, unknown: bool, min_count: int, as_json: bool) -> None:
    """Names that drift (`Dormaan` for Dorman) and names without a page (both lists unless one is asked)."""
    from ..retrieval import names as names_mod

    project = _open(root, embeds=False, enclosing=True)
    try:
        _freshen(project)
        found = names_mod.request(project, {"drift": drift, "unknown": unknown, "minCount": min_count})
    finally:
        project.close(checkpoint=False)
    if as_json:
        _emit_json(found)
        return
    if "drift" in found:
        echo(f"names that drift ({len(found['drift'])}):")
        for d in found["drift"]:
            echo(
                f"  {d['word']:<20} ~ {d['closeTo']:<16} ({d['entity']}) x{d['count']:<4} "
                f"{printable_name(d['first']['path'])}:{d['first']['line']}"
            )
    if "unknown" in found:
        echo(f"names without a page ({len(found['unknown'])}):")
        for u in found["unknown"]:
            echo(f"  {u['word']:<20} x{u['count']:<5} {printable_name(u['first']['path'])}:{u['first']['line']}")


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
        echo(
            f"{est['files']} files; {est['chunksToEmbed']} chunks (~{est['tokensToEmbed']} tokens) to embed with "
            f"{est['provider']}{'/' + est['model'] if est['model'] else ''}: about ${est['estimatedCostUsd']:.4f}"
        )
    finally:
        project.close(checkpoint=False)


@main.command()
@click.argument("root", required=False, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--wait",
    "wait_seconds",
    type=NumberRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds to wait for another process's index run to finish (0: fail at once).",
)
def clear(root: str | None, as_json: bool, wait_seconds: float) -> None:
    """Remove every file and chunk from the index (the embedding cache is kept). A run in another process is
    waited for (--wait), never cleared under."""
    from ..errors import IndexBusy

    project = _open(root)
    try:
        try:
            project.clear(
                timeout=wait_seconds,
                on_wait=lambda pid: echo(
                    f"waiting up to {wait_seconds:g} s: the index is in use by "
                    f"{f'PID {pid}' if pid else 'another process'}",
                    err=True,
                ),
            )
        except IndexBusy as exc:
            raise SaiplingError(
                f"{exc}: not cleared; try again when it finishes (`saipling status` shows the run) or wait longer "
                "(--wait SECONDS)"
            ) from None
        if as_json:
            _emit_json({"cleared": True, "root": str(project.root)})
        else:
            echo(f"cleared the index of {project.root}")
    finally:
        project.close()


def _print_results(response: dict, explain: bool) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    if response.get("degraded"):
        echo(f"note: {response['degraded']}", err=True)
    if not response["results"]:
        echo("no results")
        return
    if response.get("noConfidentMatch"):
        echo("note: no confident match: nothing here looks relevant to the query (results dimmed)", err=True)
    from ..retrieval.search import CONFIDENT

    table = Table(show_header=True, header_style="bold", expand=True)
    table.add_column("score", justify="right", width=6)
    table.add_column("file § section", ratio=2, overflow="fold")  # a path is wrapped, never cut short
    table.add_column("lines", width=9)
    table.add_column("snippet", ratio=4)
    # weak: the result's own confidence (its evidence) under the bar, not its score, which is relative to the best
    # result's (a scene under a bible note that sums it up scored 0.39 with a confidence of 0.9). The confident
    # results come first, then the weak ones under a "low confidence" divider, each in rank order: dimmed alone,
    # a weak row among strong ones looked confident once piped (no colour)
    results = response["results"]
    weak = [r.get("confidence", r["score"]) < CONFIDENT for r in results]
    order = [i for i in range(len(results)) if not weak[i]] + [i for i in range(len(results)) if weak[i]]
    first_weak = next((i for i in order if weak[i]), None)
    for i in order:  # cells are Text, never markup: paths and headings may hold `[...]`
        r = results[i]
        if i == first_weak:
            if table.row_count:
                table.add_section()
            table.add_row("", Text("low confidence", style="dim italic"), "", "", style="dim")
        heading = r["sectionHeading"]
        where = printable_name(r["filePath"]) + (f" § {printable_name(heading.lstrip('# '))}" if heading else "")
        snippet = Text(printable(r["snippet"].replace("**", "")))
        if explain and "explain" in r:
            e = r["explain"]
            snippet.append(
                f"\nkeyword rank {e['keywordRank']}, vector rank {e['vectorRank']}, cosine {_num(e['cosine'])},"
                f" fused {e['fused']}, confidence {e['confidence']}, score {e['fusedScore']}"
                + (f", exact {e['exactMatch']} match" if e.get("exactMatch") else "")
                + (f", rerank {e['rerankScore']}" if e.get("rerankScore") is not None else ""),
                style="dim",
            )
        table.add_row(
            f"{r['score']:.3f}",
            Text(where),
            f"{r['startLine']}-{r['endLine']}",
            snippet,
            style="dim" if weak[i] else None,
        )
    console.print(table)


def _count(n: int, word: str) -> str:
    """`1 chunk`, `2 chunks`."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _parse_location(spec: str) -> tuple[str, int | None, int | None]:
    """PATH[:START[-END]]"""
    import re

    m = re.fullmatch(r"(.+?):(\d+)(?:-(\d+))?", spec)
    if not m:
        return spec, None, None
    start = int(m.group(2))
    end = int(m.group(3)) if m.group(3) else None
    if start < 1:
        raise click.BadParameter(f"{spec}: lines are numbered from 1", param_hint="LOCATION")
    if end is not None and end < start:
        raise click.BadParameter(f"{spec}: the range ends ({end}) before it starts ({start})", param_hint="LOCATION")
    return m.group(1), start, (end - start + 1 if end else None)


@main.command(cls=_QueryCommand)
@click.argument("query")
@click.option("--root", type=click.Path(file_okay=False), default=None, help="Project root.")
@click.option("-k", "--max-results", "k", type=click.IntRange(1, 100), default=None, help="How many results.")
@click.option("--mode", type=click.Choice(["hybrid", "semantic", "lexical"]), default="hybrid")
@click.option("--type", "entity_types", multiple=True, help="Entity type filter (repeatable).")
@click.option("--file-type", "file_types", multiple=True, help="File type filter (repeatable).")
@click.option("--book", default=None, help="Book id filter.")
@click.option("--chapter", default=None, help="Chapter filter: ch-NN, or just its number.")
@click.option(
    "--max-chapter", type=click.IntRange(0, MAX_CHAPTER), default=None, help="Spoiler horizon: nothing after chapter N."
)
@click.option(
    "--known-by", default=None, help="Only what this character knows: scenes they are the pov of or mentioned in."
)
@click.option("--path", "path_prefix", default=None, help="Only files under this folder (from the root).")
@click.option("--glob", default=None, help="Path glob filter.")
@click.option("--role", default=None, help="Visibility role.")
@click.option("--min-score", type=NumberRange(0, 1), default=None)
@click.option("--all-files", is_flag=True, help="Ignore .context_settings.json exclusions.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--explain",
    is_flag=True,
    help="Show each result's keyword and vector ranks, cosine, fused z-score, confidence and score.",
)
def search(
    query,
    root,
    k,
    mode,
    entity_types,
    file_types,
    book,
    chapter,
    max_chapter,
    known_by,
    path_prefix,
    glob,
    role,
    min_score,
    all_files,
    as_json,
    explain,
) -> None:
    """Search the project by meaning and by words."""
    from ..retrieval.search import cli_request, run_search

    _one_blas_thread()
    project = _open(root, embeds=mode != "lexical", enclosing=True)
    try:
        if path_prefix:  # (an absolute one, as shell completion gives, is read from the root)
            path_prefix = root_relative_prefix(project.root, path_prefix)
        # click checked every option; cli_request checks the query and glob as the request schema would, without
        # importing pydantic (the schema's other faces, the server and MCP, validate with it)
        req = cli_request(
            query,
            max_results=k or project.settings.max_results_default,
            glob=glob,
            path_prefix=path_prefix,
            entity_types=list(entity_types),
            file_types=list(file_types),
            book_id=book,
            chapter_id=chapter,
            max_chapter=max_chapter,
            mode=mode,
            role=role,
            min_score=min_score or 0.0,
            respect_context_settings=not all_files,
            source="cli",
            explain=explain,
        )
        if known_by is not None:
            if not known_by.strip():
                raise click.BadParameter("an entity's name", param_hint="--known-by")
            req.filter.known_by = known_by
        _freshen(project)
        response = run_search(project, req)
        if as_json:
            _emit_json(response)
        else:
            _print_results(response, explain)
        given = {
            "--type": ", ".join(entity_types),
            "--file-type": ", ".join(file_types),
            "--book": book,
            "--chapter": chapter,
            "--max-chapter": max_chapter,
            "--known-by": known_by,
            "--path": path_prefix,
            "--glob": glob,
        }
        if not response["results"] and (given := {k: v for k, v in given.items() if v not in (None, "")}):
            _why_no_results(project, req, given)
    finally:
        project.close(checkpoint=False)


def _why_no_results(project: Project, req: Any, given: dict[str, Any]) -> None:
    from ..retrieval.filter_notes import why_no_results

    echo(f"note: {why_no_results(project, req, given, '--path')}", err=True)


@main.command(cls=_RootCommand, folder_hint="to read from a folder")
@click.argument("location")
@click.option("--root", type=click.Path(file_okay=False), default=None, help="Project root.")
@click.option("--all-files", is_flag=True, help="Also read files .context_settings.json excludes.")
@click.option("--role", default=None, help="Visibility role (default: the defaultRole setting).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def get(location: str, root: str | None, all_files: bool, role: str | None, as_json: bool) -> None:
    """Print lines of a project file: PATH[:START[-END]] (from the root, or from the current folder)."""
    from ..retrieval.reading import read_lines

    project = _open(root, embeds=False, enclosing=True)
    try:
        path, start, lines = _parse_location(location)  # (checked: start and lines >= 1)
        got = read_lines(project, _located(project, root, path), start or 1, lines, role, respect=not all_files)
        if as_json:
            _emit_json(got)
        else:
            echo(got["text"])
    finally:
        project.close(checkpoint=False)


@main.command(cls=_RootCommand)
@click.argument("location")
@click.option("--root", type=click.Path(file_okay=False), default=None, help="Project root.")
@click.option("-k", "--max-results", "k", type=click.IntRange(1, 100), default=None)
@click.option(
    "--max-chapter",
    type=click.IntRange(0, MAX_CHAPTER),
    default=None,
    help="Spoiler horizon: nothing after chapter N.",
)
@click.option("--role", default=None, help="Visibility role (default: the defaultRole setting).")
@click.option("--all-files", is_flag=True, help="Also read files .context_settings.json excludes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def related(
    location: str,
    root: str | None,
    k: int | None,
    max_chapter: int | None,
    role: str | None,
    all_files: bool,
    as_json: bool,
) -> None:
    """Passages in other files most similar to PATH, or to the passage at PATH:LINE[-END]."""
    path, start, lines = _parse_location(location)  # (checked: start and lines >= 1)
    project = _open(root, enclosing=True)
    try:
        _freshen(project)
        params: dict = {"path": _located(project, root, path)}
        if start is not None:
            params["startLine"] = start
            if lines:
                params["endLine"] = start + lines - 1
        if role is not None:
            params["role"] = role
        if k:
            params["maxResults"] = k
        if max_chapter is not None:
            params["maxChapter"] = max_chapter
        if all_files:
            params["respectContextSettings"] = False
        response = project.related(params)  # (a missing file is refused there, as by MCP and the server)
        if as_json:
            _emit_json(response)
        else:
            if not response["indexed"]:
                echo(f"{printable_name(response['path'])} is not indexed yet", err=True)
            _print_results(response, False)
    finally:
        project.close(checkpoint=False)


@main.command(cls=_QueryCommand)
@click.argument("query")
@click.option("--root", type=click.Path(file_okay=False), default=None, help="Project root.")
@click.option("--skill", default=None, help="Skill TOML name in the skills folder.")
@click.option("--loaded", multiple=True, help="A file already in the agent's context (repeatable).")
@click.option("--book", default=None, help="Only this book (and the files that belong to no book: the bible).")
@click.option("--max-tokens", type=click.IntRange(0), default=None, help="Search token budget.")
@click.option("-k", "--max-results", type=click.IntRange(1, 100), default=None, help="At most this many passages.")
@click.option(
    "--max-chapter", type=click.IntRange(0, MAX_CHAPTER), default=None, help="Spoiler horizon: nothing after chapter N."
)
@click.option("--known-by", default=None, help="Only what this character knows (scenes of their pov or naming them).")
@click.option("--role", default=None, help="Visibility role (default: the defaultRole setting).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole response as JSON.")
def enrich(query, root, skill, loaded, book, max_tokens, max_results, max_chapter, known_by, role, as_json) -> None:
    """Assemble search results into an agent context block (what saipling/enrichContext returns)."""
    project = _open(root, enclosing=True)
    try:
        _freshen(project)
        params = {
            "query": query,
            "skill": skill,
            "loadedFiles": list(loaded),
            "bookId": book,
            "maxSearchTokens": max_tokens,
            "maxResults": max_results,
            "maxChapter": max_chapter,
            "knownBy": known_by,
            "role": role,
        }
        response = project.enrich({a: b for a, b in params.items() if b is not None})
        if as_json:
            _emit_json(response)
        else:
            echo(response["contextBlock"] or f"(nothing added: {_why_nothing_added(response)})")
    finally:
        project.close(checkpoint=False)


def _why_nothing_added(response: dict) -> str:
    """Why an enrich answer is empty: for a search that ran, what came after it (nothing relevant, every passage
    over the budget: enrich_context appends it to `reason` after "; "), not why it ran."""
    reason = response["reason"]
    if response["ran"] and "; " in reason:
        return reason.split("; ", 1)[1]
    return reason


@main.command(name="eval")
@click.argument("dataset", type=click.Path(exists=True, file_okay=False))
@click.option("--split", default="test", show_default=True, help="qrels split (tune on train, report test).")
@click.option(
    "--mode",
    "modes",
    multiple=True,
    type=click.Choice(["hybrid", "semantic", "lexical"]),
    help="Modes to score (repeatable; default all three).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the corpus is written and indexed (default ~/.cache/saipling/eval/<name>).",
)
@click.option("--limit", type=int, default=None, help="Only the first N queries (quick checks).")
@provider_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def eval_cmd(dataset, split, modes, workdir, limit, provider, as_json) -> None:
    """Score retrieval on a BEIR-format DATASET: nDCG@10, recall@10, recall@100, MRR."""
    from ..retrieval.evaluation import load_beir, materialise_corpus, run_eval
    from ..retrieval.search import SearchRequest, run_search

    ds = load_beir(Path(dataset), split)
    if limit:
        keep = list(ds.queries)[:limit]
        ds.queries = {q: ds.queries[q] for q in keep}
    name = Path(dataset).resolve().name
    wd = (
        Path(workdir)
        if workdir
        else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "saipling" / "eval" / name
    )
    materialise_corpus(ds, wd)
    project = Project.open(wd, overrides={k: v for k, v in {"provider": provider}.items() if v} or None)
    try:
        from .progress import IndexBar

        with IndexBar(enabled=not as_json and sys.stderr.isatty()) as bar:
            summary = project.index(progress=bar.update)
        echo(
            f"indexed {summary.files} documents ({summary.chunks} chunks) with {project.provider.name}",
            err=True,
        )
        out = {
            "dataset": name,
            "split": split,
            "provider": project.provider.name,
            "model": project.provider.model,
            "modes": {},
        }
        for mode in modes or ("lexical", "semantic", "hybrid"):
            degraded: set[str] = set()

            def run(text: str, mode: str = mode, degraded: set[str] = degraded) -> list[dict]:
                req = SearchRequest(
                    query=text[:2000], max_results=200, mode=mode, source="eval", respect_context_settings=False
                )
                response = run_search(project, req)
                if response.get("degraded"):
                    degraded.add(response["degraded"])
                return response["results"]

            scores = run_eval(run, ds)
            out["modes"][mode] = {k: round(v, 4) if isinstance(v, float) else v for k, v in scores.items()}
            if degraded:  # the scores of this mode are really keyword-only: say so
                out["modes"][mode]["degraded"] = sorted(degraded)[0]
                echo(f"note: {mode} ran as {sorted(degraded)[0]}", err=True)
            if not as_json:
                s = out["modes"][mode]
                echo(
                    f"{mode:9s} nDCG@10 {s['ndcg@10']:.4f}  recall@10 {s['recall@10']:.4f}  "
                    f"recall@100 {s['recall@100']:.4f}  MRR {s['mrr']:.4f}  ({s['queries']} queries)"
                    + ("  [keyword only]" if degraded else "")
                )
        if as_json:
            _emit_json(out)
    finally:
        project.close()


@main.command()
@click.option("--tcp", default=None, help="Listen on HOST:PORT instead of stdio (debugging).")
@click.option("--stdio", is_flag=True, help="Use stdio (the default; accepted because LSP clients add it).")
def serve(tcp: str | None, stdio: bool) -> None:
    """Run the language server on stdio (what editors start)."""
    from ..lsp.server import run

    run(tcp=tcp)


@main.command()
@click.argument("root", required=False, type=click.Path(file_okay=False))
@provider_option
def mcp(root: str | None, provider: str | None) -> None:
    """Serve ROOT to AI agents over MCP on stdio. Its eight tools:

    \b
      search          find passages by meaning and by words
      get             read exact lines of a file
      enrich_context  assemble the passages worth adding for a task, under a token budget
      related         passages like a file, or like the passage at some of its lines
      status          what the index holds, and whether it is still indexing
      mentions        where a character or place is mentioned, per chapter
      check_passage   the evidence to check a passage against the profiles
      names           names that drift, and names with no page
    """
    from ..mcp.server import run

    run(_open(root, create=True, provider=provider))


@main.command(name="export", cls=_RootCommand, folder_hint="to export the index of a folder")
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--root", default=None, type=click.Path(file_okay=False), help="The project (default: the nearest).")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON summary on stdout.")
def export_cmd(out: str, root: str | None, as_json: bool) -> None:
    """Write the vectors of the project's index to OUT, for `saipling import` into another store (SQLite file or
    PostgreSQL workspace) without embedding again."""
    from ..indexing.transfer import export_vectors

    project = _open(root, embeds=False)
    try:
        done = export_vectors(project.store, Path(out), project.root, project.settings)
    finally:
        project.close(checkpoint=False)
    if as_json:
        _emit_json(done)
    else:
        what = f"{done['model']} ({done['dimensions']} dimensions)"
        echo(f"exported {done['vectors']:,} vectors of {what} to {out}")


@main.command(name="import", cls=_RootCommand, folder_hint="to import into a folder")
@click.argument("src", type=click.Path(exists=True, dir_okay=False))
@click.option("--root", default=None, type=click.Path(file_okay=False), help="The project (default: the nearest).")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON summary on stdout.")
@provider_option
def import_cmd(src: str, root: str | None, as_json: bool, provider: str | None) -> None:
    """Load the vectors of an export file into this project's store (its `store` setting) and index the project
    there: chunks whose text is unchanged take their vectors from it, none is embedded again (a paid provider is
    not asked to embed the rest: `saipling index` does that)."""
    from ..indexing.transfer import dropped_text, read_export, store_vectors

    export = read_export(Path(src))  # (a file that is not an export is refused before the project is opened)
    project = _open(root, create=True, provider=provider)
    try:
        loaded = store_vectors(project.store, export)
        key = getattr(project.provider, "vector_key", None)
        if key and (key, project.provider.dimensions) != (loaded["model"], loaded["dimensions"]):
            echo(
                f"warning: the vectors are of {loaded['model']} ({loaded['dimensions']} dimensions) but this project "
                f"embeds with {key} ({project.provider.dimensions}): they will not be used",
                err=True,
            )
        summary = project.index(confirm=lambda _est: False)  # (a paid provider is never called without asking)
    finally:
        project.close()
    out = loaded | {"embedded": summary.embedded, "reused": summary.reused, "chunks": summary.chunks}
    if as_json:
        _emit_json(out)
    else:
        echo(
            f"imported {loaded['vectors']:,} vectors{dropped_text(loaded)}; indexed {summary.chunks:,} chunks: "
            f"{summary.reused:,} vectors reused, {summary.embedded:,} embedded"
        )


if __name__ == "__main__":
    main()
