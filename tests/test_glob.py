"""The one glob matcher (paths.Glob, issue 30): the semantics of the regex it replaced, time linear in the path
for every pattern (no backtracking run of stars), limits on a pattern's length and count, and NFC on both sides."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import threading
import unicodedata
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from fixtures import open_project
from saipling import paths
from saipling.config.settings import Settings, apply_layer
from saipling.errors import InvalidRequest
from saipling.files.context_settings import load_context_settings
from saipling.files.scanner import scan
from saipling.paths import MAX_GLOB_CHARS, MAX_GLOBS, Glob, glob_match, glob_problem


# -- the reference: the regex translation every earlier test was written against (small inputs only) -------
def reference_regex(pattern: str) -> re.Pattern[str]:
    pat = pattern.replace("\\", "/").lstrip("/")
    folder = pat.endswith("/")
    pat = pat.rstrip("/")
    out: list[str] = []
    i = 0
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and (j := pat.find("]", i + 1)) != -1:
            body = pat[i + 1 : j]
            body = "^" + body[1:] if body.startswith("!") else body
            try:
                re.compile(f"[{body}]")
                out.append(f"[{body}]")
            except re.error:
                out.append("(?!)")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    prefix = "" if "/" in pat else "(?:.*/)?"
    return re.compile(prefix + "".join(out) + (r"/.*\Z" if folder else r"\Z"))


def reference_match(path: str, pattern: str) -> bool:
    rx = reference_regex(pattern)
    parts = path.split("/")
    return rx.match(path) is not None or any(rx.match("/".join(parts[:i])) for i in range(1, len(parts)))


PATTERN_PIECES = [
    "a",
    "b",
    ".",
    "/",
    "*",
    "**",
    "**/",
    "?",
    "[ab]",
    "[!a]",
    "[a-]",
    "[z-a]",
    "[",
    "]",
    "\\",
    "-",
]
patterns = st.lists(st.sampled_from(PATTERN_PIECES), max_size=7).map("".join)
small_paths = st.text(alphabet="ab./", max_size=10)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=patterns, path=small_paths)
@example(pattern="", path="a")
@example(pattern="**/*.md", path="a/b.md")
@example(pattern="a/", path="a")
@example(pattern="[!a]", path="b/a")
def test_the_matcher_agrees_with_the_regex_it_replaced(pattern: str, path: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # (`[[`: "possible nested set", as before)
        expected = reference_match(path, pattern)
        whole = reference_regex(pattern).match(path) is not None
        fast, table = Glob(pattern), Glob(pattern, table_only=True)
    assert fast.match(path) == table.match(path) == expected, (pattern, path)
    assert fast.fullmatch(path) == table.fullmatch(path) == whole, (pattern, path)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(globs=st.lists(patterns, max_size=3), path=st.text(alphabet="ab./é", max_size=10))
@example(globs=["**/*.md"], path="a/é.md")
@example(globs=["**/*.md"], path="a/b.mdx")
@example(globs=[], path="a")
def test_the_scans_one_function_matcher_agrees_with_any_match(globs: list[str], path: str) -> None:
    """any_matcher (the scan's check of every file against include and exclude, row S29) is any_match."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        assert paths.any_matcher(globs)(path) == paths.any_match(path, globs), (globs, path)


def test_behaviours_the_scanner_and_filters_rely_on() -> None:
    cases = [
        ("drafts/a.md", "drafts", True),
        ("book/drafts/deep/a.md", "drafts", True),
        ("drafts.md", "drafts", False),
        ("notes/sub/x.md", "notes/*.md", False),
        ("notes/x.md", "notes/*.md", True),
        ("a/b/c.md", "**/*.md", True),
        ("c.md", "**/*.md", True),
        ("x/c.md", "*.md", True),
        ("x/c.mdx", "*.md", False),
        ("drafts/a.md", "/drafts/", True),
        ("drafts", "drafts/", False),
        ("A.md", "a.md", False),
        ("a\\b.md", "a/b.md", False),
        ("a/b.md", "a\\b.md", True),
        ("books/b1/ch-01/s.md", "books/*/ch-0[12]/*.md", True),
        ("books/b1/ch-03/s.md", "books/*/ch-0[12]/*.md", False),
        ("z.md", "[z-a].md", False),
        ("x/yab", "x**b", True),
        ("x/y/b", "x**b", True),
        ("[.md", "[.md", True),
    ]
    for path, pattern, expected in cases:
        for glob in (Glob(pattern), Glob(pattern, table_only=True)):
            assert glob.match(path) is expected, (path, pattern, glob._rx is not None)


# -- time: steps counted (the table), and a wall-clock bound in a subprocess ---------------------------------
STAR_PIECES = ["*", "**", "?", "**/", "a", "/", ".mdx", "[!/]"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pattern=st.lists(st.sampled_from(STAR_PIECES), min_size=4, max_size=30).map("".join),
    path=st.text(alphabet="a/.mdx", min_size=80, max_size=200),
)
@example(pattern="**?**?**?**?**?**?**.mdx", path="a" * 80)
@example(pattern="*a*a*a*a*a*a*a*a*b", path="a" * 200)
def test_every_character_is_read_once_in_at_most_one_set_of_positions(pattern: str, path: str) -> None:
    steps: list[int] = []

    class Counted(Glob):
        def _step(self, positions: frozenset[int], c: str) -> frozenset[int]:
            steps.append(len(positions))
            return super()._step(positions, c)

    glob = Counted(pattern, table_only=True)
    glob.match(path)
    glob.fullmatch(path)
    assert steps  # (the table was used)
    assert len(steps) <= 2 * len(path)  # one transition per character at most, each over a bounded set
    assert all(size <= 2 * (len(glob._kinds) + 1) for size in steps)


ADVERSARIAL = [
    "**?**?**?**?**?**?**.mdx",
    "*a*a*a*a*a*a*a*a*a*a*b",
    "**/a/**/a/**/a/**/a/**/a/**/b",
    "?*?*?*?*?*?*?*?*?*x",
    "a**a**a**a**a**a**a**b",
    "*[!/]*[!/]*[!/]*[!/]*[!/]*z",
    "**a**a**a**a**a**a**a**a/",
]


def test_adversarial_globs_finish_quickly_in_a_subprocess() -> None:
    """Each of these took seconds to hours with the backtracking regex (44 s for the first on one 80-character
    path); all of them on many long paths finish well inside a generous bound."""
    script = textwrap.dedent(
        f"""
        from saipling.paths import glob_match
        paths = ["a" * 80, "a" * 200, "a/" * 100, ("aaaa/" * 40)[:-1] + "x.md", "a" * 190 + ".mdx.md"]
        n = 0
        for pattern in {ADVERSARIAL!r}:
            for path in paths:
                n += glob_match(path, pattern)
        print(n)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().isdigit()


def test_globs_matched_by_a_regex_stay_linear_on_long_adversarial_paths() -> None:
    """Globs the linear-regex check lets through (at most one `*` a name, one `**/`, `**` last), random and
    star-heavy, on 4,000-character paths: a backtracking blow-up (O(n^2) or worse) would take minutes here."""
    script = textwrap.dedent(
        """
        import random
        from saipling.paths import Glob
        rng = random.Random(3)
        pieces = ["*", "**", "**/", "?", "a", "/", "[ab]", "[!/]", ".mdx", "b"]
        paths = ["a/" * 2000, "a" * 4000, ("ab/" * 1400)[:4000], ("a" * 40 + "/") * 98]
        checked = 0
        for _ in range(3000):
            glob = Glob("".join(rng.choice(pieces) for _ in range(rng.randint(2, 24))))
            if glob._rx is None:
                continue
            checked += 1
            for p in paths:
                glob.match(p), glob.fullmatch(p)
        print(checked)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 300  # (enough of them took the regex path)


def test_a_cli_search_with_an_adversarial_glob_answers(tmp_path: Path) -> None:
    root = tmp_path / "p"
    deep = root / ("a" * 60) / ("b" * 40)
    deep.mkdir(parents=True)
    (deep / "storm-at-sea-in-the-night.md").write_text("# Storm\n\nThe storm rolled over the sea.\n")
    (root / "notes-later.mdx.md").write_text("# X\n\nstorm\n")
    env = {"SAIPLING_PROVIDER": "none"}
    cmd = [sys.executable, "-m", "saipling"]
    subprocess.run([*cmd, "index", str(root)], check=True, capture_output=True, timeout=120, env=_env(env))
    done = subprocess.run(
        [*cmd, "search", "storm", "--root", str(root), "--json", "--glob", "**?**?**?**?**?**?**.mdx*"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(env),
    )
    assert done.returncode == 0, done.stderr
    found = {r["filePath"] for r in json.loads(done.stdout)["results"]}
    assert found == {"notes-later.mdx.md"}


def _env(extra: dict[str, str]) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("SAIPLING_")}
    return {**env, **extra}


# -- limits --------------------------------------------------------------------------------------------------
def test_a_glob_over_the_length_limit_is_refused_naming_the_field() -> None:
    from saipling.retrieval.requests import SearchParams, parse
    from saipling.retrieval.search import cli_request

    long_glob = "*a" * (MAX_GLOB_CHARS // 2 + 1)
    assert glob_problem("*a" * (MAX_GLOB_CHARS // 2)) is None
    assert "at most" in (glob_problem(long_glob) or "")
    with pytest.raises(InvalidRequest) as refused:
        parse(SearchParams, {"query": "storm", "filter": {"glob": long_glob}})
    assert refused.value.field == "filter.glob"
    with pytest.raises(InvalidRequest) as refused_cli:
        cli_request("storm", max_results=5, glob=long_glob)
    assert refused_cli.value.field == "filter.glob"


def test_config_globs_over_the_limits_are_refused_with_a_warning_naming_the_setting() -> None:
    settings = Settings()
    warnings_ = apply_layer(
        settings,
        {
            "exclude": ["x"] * (MAX_GLOBS + 1),
            "include": ["*" * (MAX_GLOB_CHARS + 1)],
            "corpora": {"n": ["a"] * 2000},
        },
        "config.toml",
        allow_secrets=False,
    )
    assert any("exclude" in w and str(MAX_GLOBS) in w for w in warnings_), warnings_
    assert any("include" in w and str(MAX_GLOB_CHARS) in w for w in warnings_), warnings_
    assert any("corpora" in w for w in warnings_), warnings_
    assert settings.include == ["**/*.md"] and settings.exclude == [] and settings.corpora == {}
    fine = apply_layer(settings, {"exclude": ["drafts/", "*.tmp.md"]}, "config.toml", allow_secrets=False)
    assert fine == [] and settings.exclude == ["drafts/", "*.tmp.md"]


# -- NFC on both sides ---------------------------------------------------------------------------------------
def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


accented = st.text(alphabet="aeéèöñÅço/.-", min_size=1, max_size=16)


@settings(max_examples=300, deadline=None)
@given(name=accented, wild=st.booleans())
def test_nfc_and_nfd_spellings_match_each_other(name: str, wild: bool) -> None:
    assume(name.strip("/") == name and "//" not in name)
    pattern = nfc(name).replace("o", "?") if wild else nfc(name)  # (`ö` is one character in NFC: left alone)
    assert glob_match(nfd(name), nfc(pattern)) and glob_match(nfc(name), nfd(pattern))
    assert glob_match(nfd(name), nfd(pattern)) and glob_match(nfc(name), nfc(pattern))
    if nfd(name) != nfc(name):
        assert Glob(nfc(name)).fullmatch(nfd(name)) and Glob(nfd(name), table_only=True).fullmatch(nfc(name))


def test_an_nfc_exclusion_hides_the_nfd_file_in_config_and_context_settings(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    (root / "notes").mkdir(parents=True)
    stored = nfd("notes/privé.md")  # as macOS writes the name
    (root / stored).write_text("# secret\n")
    (root / "notes" / "public.md").write_text("# public\n")
    typed = nfc("notes/privé.md")
    assert typed != stored

    result = scan(root, Settings(exclude=[typed]))
    assert [e.rel for e in result.entries] == ["notes/public.md"]
    assert (stored, "excluded by config") in result.skipped

    (root / ".context_settings.json").write_text(json.dumps({typed: "exclude"}), encoding="utf-8")
    cs = load_context_settings(root)
    assert cs.mode_for(stored) == "exclude" and cs.mode_for(typed) == "exclude"
    assert cs.excluded([stored, "notes/public.md"]) == [stored]
    keys = {nfd("notes/privé/"): "exclude", nfd("*é.md"): "force"}
    (root / ".context_settings.json").write_text(json.dumps(keys) + " ", encoding="utf-8")
    folder_key = load_context_settings(root)
    assert folder_key.mode_for(nfc("notes/privé/a.md")) == "exclude"
    assert folder_key.mode_for(nfc("x/café.md")) == "force"


def test_search_filters_compare_paths_in_nfc(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    folder = root / nfd("carnets-privés")
    folder.mkdir(parents=True)
    (folder / nfd("été.md")).write_text("# Été\n\nThe storm came in summer.\n")
    (root / "other.md").write_text("# Other\n\nA storm elsewhere.\n")
    stored = nfd("carnets-privés/été.md")
    with open_project(root) as project:
        project.index()
        filters = [
            {"glob": nfc("carnets-privés/*.md")},
            {"pathPrefix": nfc("carnets-privés/")},
            {"glob": nfc("été.md")},
        ]
        for flt in filters:
            response = project.search({"query": "storm", "mode": "lexical", "filter": flt})
            assert [r["filePath"] for r in response["results"]] == [stored], flt


def test_the_public_names_are_kept() -> None:
    """Other modules (scanner, context settings, visibility) call these by name."""
    for name in ("glob_match", "any_match", "glob_problem", "glob_list_problem", "compile_glob", "nfc"):
        assert callable(getattr(paths, name))


def test_a_full_table_starts_over_and_answers_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table's memory is bounded: when full, the match goes on over sets of positions, and the next one starts
    a new table; the answers never change."""
    import random

    rng = random.Random(7)
    pattern = "**?**?**?**?**?**?**.mdx"
    sample = ["".join(rng.choice("ab/.mdx") for _ in range(rng.randint(40, 120))) for _ in range(150)]
    expected = [Glob(pattern).match(p) for p in sample]
    assert any(expected) and not all(expected)
    monkeypatch.setattr(paths, "_MAX_CELLS", 40)
    small = Glob(pattern, table_only=True)
    assert [small.match(p) for p in sample] == expected
    assert small._table.cells <= 40 + 2 * (len(small._kinds) + 2)


def test_get_finds_the_nfd_file_typed_in_nfc_and_its_exclusion_holds(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    (root / "notes").mkdir(parents=True)
    (root / nfd("notes/été.md")).write_text("# Été\n\nsummer storm\n")
    (root / nfd("notes/privé.md")).write_text("# secret\n")
    (root / ".context_settings.json").write_text(json.dumps({nfc("notes/privé.md"): "exclude"}), encoding="utf-8")
    with open_project(root) as project:
        project.index()
        got = project.get({"path": nfc("notes/été.md")})
        assert "summer storm" in got["text"]
        with pytest.raises(InvalidRequest):
            project.get({"path": nfc("notes/privé.md"), "respectContextSettings": True})
        with pytest.raises(InvalidRequest):
            project.get({"path": nfd("notes/privé.md"), "respectContextSettings": True})


def test_a_settings_file_with_more_globs_than_the_cache_compiles_each_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compile_glob keeps 256 globs: a `.context_settings.json` with more recompiled every one for every path
    checked (400 keys made a search 10x slower). The settings compile their own, once; the longest match wins."""
    keys = {f"notes/*-{i:04d}[!x].md": "exclude" for i in range(400)}
    keys["notes/a*-0399[!z].md"] = "force"  # (longer than the key it overlaps)
    (tmp_path / ".context_settings.json").write_text(json.dumps(keys), encoding="utf-8")
    built: list[str] = []
    real_init = Glob.__init__

    def counting(self: Any, pattern: str) -> None:
        built.append(pattern)
        real_init(self, pattern)

    monkeypatch.setattr(Glob, "__init__", counting)
    cs = load_context_settings(tmp_path)
    files = [f"notes/a-{i:04d}y.md" for i in range(0, 400, 7)] + ["notes/a-0399y.md", "notes/other.md"]
    modes = {f: cs.mode_for(f) for f in files * 3}
    assert modes["notes/a-0000y.md"] == modes["notes/a-0392y.md"] == "exclude"
    assert modes["notes/a-0399y.md"] == "force" and modes["notes/other.md"] == "auto"
    assert len(built) <= len(keys)


@pytest.mark.parametrize(
    ("key", "note"),
    [
        ("secret/ ", "has spaces around it"),
        (" secret", "has spaces around it"),
        ("/secret/", None),  # (the root's secret/, as gitignore reads it)
        ("SECRET/", None),  # (one folder on a case-insensitive disk: excluded either way)
        ("{root}/secret/", "is an absolute path"),
        ("Secret/Deep/X.md", None),
    ],
)
def test_an_exclusion_a_slip_away_from_its_folder_still_excludes_it(tmp_path: Path, key: str, note: str | None) -> None:
    """Keys an author writes a little off (spaces, an absolute path inside the root, other case) excluded nothing,
    silently: the private files stayed searchable (privacy failed open)."""
    (tmp_path / ".context_settings.json").write_text(
        json.dumps({key.replace("{root}", str(tmp_path)): "exclude"}), encoding="utf-8"
    )
    cs = load_context_settings(tmp_path)
    assert cs.mode_for("secret/deep/x.md") == "exclude"
    assert cs.mode_for("public.md") == "auto" and cs.mode_for("secretive.md") == "auto"
    assert (note in (cs.warning or "")) if note else not cs.warning


def test_a_file_whose_name_holds_a_backslash_is_excluded_by_its_name_as_written(tmp_path: Path) -> None:
    (tmp_path / ".context_settings.json").write_text(json.dumps({"notes\\secret.md": "exclude"}), encoding="utf-8")
    cs = load_context_settings(tmp_path)
    assert cs.mode_for("notes\\secret.md") == "exclude" and cs.mode_for("notes/secret.md") == "exclude"


def test_status_names_the_exclusions_that_exclude_no_file(tmp_path: Path) -> None:
    for rel in ("secret/a.md", "notes/b.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("# t\n\nwords\n", encoding="utf-8")
    keys = {"secret/": "exclude", "{secret}/": "exclude", "notes/*.md": "exclude", "drafts/**": "exclude"}
    (tmp_path / ".context_settings.json").write_text(json.dumps(keys), encoding="utf-8")
    with open_project(tmp_path) as project:
        project.index()
        warned = [w for w in project.status()["warnings"] if "name no indexed file" in w]
        assert len(warned) == 1 and '"{secret}/"' in warned[0] and '"drafts/**"' in warned[0]
        assert '"secret/"' not in warned[0] and "notes/*.md" not in warned[0]
        (tmp_path / ".context_settings.json").write_text(json.dumps({"secret/": "exclude"}), encoding="utf-8")
        assert not [w for w in project.status()["warnings"] if "name no indexed file" in w]


def test_settings_shared_by_threads_exclude_in_any_case_from_the_first_call(tmp_path: Path) -> None:
    """The case-insensitive exclusions were built lazily by the first mode_for, after the globs: a second thread
    that saw the globs but not them found `SECRET/a.md` auto (20 of 20 runs of a review's script). They are
    built with the object now, before any thread shares it."""
    modes = {f"k{i}/": "exclude" for i in range(20_000)} | {"secret/": "exclude", "notes/*-x.md": "exclude"}
    (tmp_path / ".context_settings.json").write_text(json.dumps(modes), encoding="utf-8")
    for _ in range(3):
        load_context_settings.__globals__["_cache"].clear()
        cs = load_context_settings(tmp_path)
        got: list[str] = []

        def check(settings: Any, rel: str, out: list[str]) -> None:
            out.append(settings.mode_for(rel))

        threads = [
            threading.Thread(target=check, args=(cs, p, got))
            for p in ("x.md", "SECRET/a.md", "Secret/b.md", "notes/a-x.md") * 4
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(got).count("exclude") == 12 and got.count("auto") == 4


@pytest.mark.parametrize(
    ("keys", "unmatched"),
    [
        ({"./secret/": "exclude", " secret/": "exclude", "secret\\\\": "exclude"}, []),  # forms of one folder
        ({"{root}/secret/": "exclude", "notes/*.md": "exclude", "./": "exclude"}, []),
        ({"{secret}/": "exclude", "secret/": "exclude", "drafts/**": "exclude"}, ["{secret}/", "drafts/**"]),
        ({"notes/": "auto", "gone/": "force"}, []),  # (only exclusions protect anything)
    ],
)
def test_only_exclusions_under_which_no_file_falls_are_named(
    tmp_path: Path, keys: dict[str, str], unmatched: list[str]
) -> None:
    """A key read in several forms (`./secret/`, spaces, a backslash, an absolute path) names a file when one of
    them does; a review found working exclusions reported as naming nothing."""
    keys = {k.replace("{root}", str(tmp_path)): v for k, v in keys.items()}
    (tmp_path / ".context_settings.json").write_text(json.dumps(keys), encoding="utf-8")
    cs = load_context_settings(tmp_path)
    assert cs.excluding_nothing(["secret/a.md", "notes/b.md", "c.md"]) == unmatched


def test_a_key_naming_the_whole_project_excludes_every_file_and_no_other_mode_may(tmp_path: Path) -> None:
    for key in ("./", ".", str(tmp_path), str(tmp_path) + "/"):
        (tmp_path / ".context_settings.json").write_text(json.dumps({key: "exclude", "notes/a.md": "auto"}))
        load_context_settings.__globals__["_cache"].clear()
        cs = load_context_settings(tmp_path)
        assert cs.mode_for("x.md") == cs.mode_for("deep/y.md") == "exclude", key
        assert cs.mode_for("notes/a.md") == "auto"  # (an exact key still wins)
    (tmp_path / ".context_settings.json").write_text(json.dumps({"./": "force"}))
    load_context_settings.__globals__["_cache"].clear()
    cs = load_context_settings(tmp_path)
    assert cs.mode_for("x.md") == "auto" and cs.forced() == [] and "names the whole project" in (cs.warning or "")


def test_only_exclusions_are_read_leniently(tmp_path: Path) -> None:
    """An `auto` key with a stray space or an absolute path still names nothing, as before: read leniently it
    took a file out of an exclusion (fail open)."""
    keys = {"secret/": "exclude", "secret/a.md ": "auto", str(tmp_path / "secret" / "b.md"): "auto"}
    (tmp_path / ".context_settings.json").write_text(json.dumps(keys), encoding="utf-8")
    cs = load_context_settings(tmp_path)
    assert cs.mode_for("secret/a.md") == cs.mode_for("secret/b.md") == "exclude"


def test_an_exclusion_added_in_a_broken_edit_is_read_as_any_exclusion(tmp_path: Path) -> None:
    settings = tmp_path / ".context_settings.json"
    settings.write_text(json.dumps({"drafts/": "exclude"}), encoding="utf-8")
    assert load_context_settings(tmp_path).mode_for("secret/a.md") == "auto"
    settings.write_text('{"drafts/": "exclude", " secret/ ": "exclude", "' + str(tmp_path) + '/diary/": "exclude",}')
    cs = load_context_settings(tmp_path)
    assert "is invalid" in (cs.warning or "")
    assert cs.mode_for("secret/a.md") == cs.mode_for("diary/b.md") == cs.mode_for("drafts/c.md") == "exclude"


def test_an_excluded_name_without_a_slash_is_excluded_anywhere_as_in_every_glob(tmp_path: Path) -> None:
    """configuration.md: a pattern without `/` matches a name anywhere. `{"Bestiary": "exclude"}` excluded nothing in
    a vault whose Bestiary is `Compendium/13A/Bestiary/` (a first-hour trial); a leading `/` keeps to the root's."""
    for key, inside, at_root in (
        ("Bestiary", "exclude", "exclude"),
        ("Bestiary/", "exclude", "exclude"),
        ("/Bestiary/", "auto", "exclude"),
    ):
        (tmp_path / ".context_settings.json").write_text(json.dumps({key: "exclude"}), encoding="utf-8")
        load_context_settings.__globals__["_cache"].clear()
        cs = load_context_settings(tmp_path)
        assert cs.mode_for("Compendium/13A/Bestiary/Orc.md") == inside, key
        assert cs.mode_for("Bestiary/Orc.md") == at_root and cs.mode_for("Compendium/Bestiary.md") == "auto", key


@pytest.mark.parametrize(
    "keys",
    [
        {"Bestiary": "exclude", "Compendium/": "auto"},
        {"Compendium/": "auto", "Bestiary": "exclude"},  # (the keys' order never decides)
        {"Compendium/13A/": "force", "Bestiary": "exclude"},  # (a longer folder key of another mode)
        {"bestiary": "exclude"},  # (another case)
    ],
)
def test_a_name_excluded_anywhere_wins_over_the_folders_above_it(tmp_path: Path, keys: dict[str, str]) -> None:
    """A review found `{"Compendium/13A/": "force", "Bestiary": "exclude"}` left Compendium/13A/Bestiary/a.md forced:
    the name's match counts the path up to it (23 characters), and at equal length the stricter mode wins."""
    (tmp_path / ".context_settings.json").write_text(json.dumps(keys), encoding="utf-8")
    cs = load_context_settings(tmp_path)
    for rel in ("Compendium/Bestiary/a.md", "Compendium/13A/Bestiary/a.md", "Bestiary/a.md"):
        assert cs.mode_for(rel) == "exclude", rel
    assert cs.mode_for("Compendium/13A/Orcs/a.md") == keys.get("Compendium/13A/", keys.get("Compendium/", "auto"))


def test_a_name_excluded_anywhere_is_read_literally(tmp_path: Path) -> None:
    (tmp_path / ".context_settings.json").write_text(json.dumps({"Notes [old]": "exclude"}), encoding="utf-8")
    cs = load_context_settings(tmp_path)
    assert cs.mode_for("x/Notes [old]/a.md") == cs.mode_for("Notes [old]/a.md") == "exclude"
    assert cs.excluding_nothing(["x/Notes [old]/a.md"]) == [] and cs.excluding_nothing(["y.md"]) == ["Notes [old]"]


def test_status_counts_the_files_the_settings_exclude_and_an_agent_is_not_told(tmp_path: Path) -> None:
    """A note-taker checking their `.context_settings.json` saw nothing in status while it worked."""
    for rel in ("secret/a.md", "secret/b.md", "notes/c.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("# t\n\nwords\n", encoding="utf-8")
    (tmp_path / ".context_settings.json").write_text(json.dumps({"secret/": "exclude"}), encoding="utf-8")
    with open_project(tmp_path) as project:
        project.index()
        assert project.status()["excludedFiles"] == 2
        from saipling.mcp.server import McpFace

        assert "excludedFiles" not in McpFace(project).call("status", {})
