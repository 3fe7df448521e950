"""The cold one-shot CLI beside ripgrep on the 13th Age vault, side by side in one run (issue 18).

An agent or a script runs `saipling search` once per question, so the whole process is what counts: Python's
start-up, the imports, opening the index, the search, the JSON, the exit. Every round runs each command once as a
fresh process, interleaved (A B C ..., then C B A ...); the figures are medians over the rounds of the wall time
(spawn to exit) and of the process's CPU time (user + system: less sensitive to a busy machine). Ratios are of
medians from the same run.

    saipling search WORD --mode lexical --json --root COPY     (the issue's target: <= 120 ms, <= 8x rg)
    rg -n -i WORD COPY
    saipling get NOTE:1-20 --json --root COPY
    saipling status --json COPY
    python -c pass, python -S -c pass                           (the interpreter's own floor)

COPY is a copy of ../shared/corpora/13th-age-srd indexed once with `--provider none` (default) or `local`
(`--provider local`: the typical setup; a lexical search must still load no model), kept under
$SAIPLING_BENCH_CACHE (default /tmp/saipling-bench) for later runs.

Bytecode: saipling runs as an installed package does (pip and pipx write .pyc files at install time): the
warm-up runs write them into a temporary PYTHONPYCACHEPREFIX, so the source tree gets none. `--as-is` adds a row
run with this environment unchanged: an editable checkout with PYTHONDONTWRITEBYTECODE=1 and no __pycache__
compiles every saipling module at each start.

    SAIPLING_SHARED=/work/shared python benchmarks/bench_cold_cli.py [--quick] [--provider local] [--as-is]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchutil as bu  # noqa: E402

CORPUS = bu.SHARED / "corpora" / "13th-age-srd"
TARGET_MS = 120.0
TARGET_RATIO = 8.0


def saipling_command() -> list[str]:
    """The console script a user runs (its wrapper included), else `python -m saipling`."""
    script = Path(sys.executable).parent / "saipling"
    if script.is_file():
        return [str(script)]
    found = shutil.which("saipling")
    return [found] if found else [sys.executable, "-m", "saipling"]


def indexed_copy(provider: str) -> Path:
    """The vault copied and indexed once per provider (reused while its marker is there)."""
    root = bu.CACHE_ROOT / f"cold-cli-{provider}" / "vault"
    marker = root.parent / "complete"
    if marker.exists():
        return root
    shutil.rmtree(root.parent, ignore_errors=True)
    n = bu.copy_corpus(CORPUS, root)
    print(f"   indexing a copy of the vault ({n} notes, provider {provider}) into {root} ...", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*saipling_command(), "index", str(root), "--provider", provider, "--json", "--yes"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"indexing failed: {proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout)
    print(
        f"   indexed {summary['files']} files, {summary['chunks']} chunks, {summary['embedded']} embedded "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    marker.write_text(proc.stdout, encoding="utf-8")
    return root


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s, exit status) of one fresh process, its output thrown away."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    return wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def main() -> None:
    p = bu.parser(__doc__.split("\n\n")[0])
    p.add_argument("--provider", choices=["none", "local"], default="none", help="how the copy is indexed")
    p.add_argument("--word", default="dragon")
    p.add_argument("--rounds", type=int, default=None, help="default 40 (--quick: 10)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--as-is", action="store_true", help="also run saipling with this environment unchanged")
    args = p.parse_args()
    bu.banner("cold one-shot CLI vs ripgrep, 13th Age vault", args.quick)
    if not bu.need_shared(CORPUS, "bench_cold_cli"):
        return
    if args.provider == "local" and not bu.local_available():
        print("SKIPPED: the local model extra is not installed")
        return
    rounds = args.rounds or (10 if args.quick else 40)
    root = indexed_copy(args.provider)
    note = next(f for f in sorted(root.glob("*.md")) if not f.read_text(encoding="utf-8").startswith("---"))
    sai = saipling_command()
    if not Path(sai[0]).is_absolute():
        sai[0] = shutil.which(sai[0]) or sai[0]
    rg = shutil.which("rg")
    python = sys.executable
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("SAIPLING_")}
    with tempfile.TemporaryDirectory(prefix="bench-cold-pyc-") as pyc:
        installed = {k: v for k, v in base_env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        installed["PYTHONPYCACHEPREFIX"] = pyc
        search = [*sai, "search", args.word, "--mode", "lexical", "--json", "--root", str(root)]
        cases: list[tuple[str, list[str], dict[str, str]]] = [
            (f"saipling search {args.word} --mode lexical --json", search, installed)
        ]
        if args.as_is:
            flag = "PYTHONDONTWRITEBYTECODE=1" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode on"
            cases.append((f"  same, environment as is ({flag})", search, base_env))
        if rg:
            cases.append((f"rg -n -i {args.word}", [rg, "-n", "-i", args.word, str(root)], base_env))
        else:
            print("   (ripgrep not installed: no ratio)")
        cases += [
            (
                f"saipling get {note.name}:1-20 --json",
                [*sai, "get", f"{note.name}:1-20", "--json", "--root", str(root)],
                installed,
            ),
            ("saipling status --json", [*sai, "status", "--json", str(root)], installed),
            ("python -c pass", [python, "-c", "pass"], installed),
            ("python -S -c pass", [python, "-S", "-c", "pass"], installed),
        ]
        check = subprocess.run(search, capture_output=True, text=True, env=installed)
        if check.returncode != 0 or not json.loads(check.stdout)["results"]:
            raise SystemExit(f"the search failed or found nothing: {check.stderr[-2000:]}")
        print(
            f"   {rounds} rounds after {args.warmup} warm-up rounds, saipling = {' '.join(sai)}, index "
            f"provider {args.provider}"
        )
        load_before = bu._loadavg()
        walls: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        cpus: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        for r in range(args.warmup + rounds):
            order = cases if r % 2 == 0 else cases[::-1]
            for name, argv, env in order:
                wall, cpu, code = run_once(argv, env)
                if code != 0:
                    raise SystemExit(f"{name} exited with {code}")
                if r >= args.warmup:
                    walls[name].append(wall)
                    cpus[name].append(cpu)
        load_after = bu._loadavg()
    rg_name = next((name for name, _, _ in cases if name.startswith("rg ")), None)
    rg_p50 = bu.median(walls[rg_name]) if rg_name else None
    rows = []
    for name, _, _ in cases:
        w, c = walls[name], cpus[name]
        ratio = f"{bu.median(w) / rg_p50:.2f}x" if rg_p50 else "-"
        rows.append(
            [
                name,
                bu.fmt_ms(bu.median(w)),
                bu.fmt_ms(sum(w) / len(w)),
                bu.fmt_ms(min(w)),
                bu.fmt_ms(bu.median(c)),
                ratio,
            ]
        )
    print(bu.table(["command (fresh process)", "wall p50 ms", "mean", "min", "CPU p50 ms", "vs rg p50"], rows))
    print(f"   load average before {load_before}, after {load_after}")
    first = cases[0][0]
    p50 = bu.median(walls[first]) * 1000
    print(f"   target <= {TARGET_MS:.0f} ms: {bu.verdict(p50 <= TARGET_MS)} ({p50:.1f} ms)")
    if rg_p50:
        ratio = p50 / (rg_p50 * 1000)
        print(f"   target <= {TARGET_RATIO:.0f}x rg: {bu.verdict(ratio <= TARGET_RATIO)} ({ratio:.2f}x)")
    floor = bu.median(walls["python -c pass"]) * 1000
    print(f"   interpreter floor (python -c pass) {floor:.1f} ms: {floor / p50:.0%} of the search")


if __name__ == "__main__":
    main()
