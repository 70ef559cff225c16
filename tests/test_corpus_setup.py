"""The documentation corpus: one place says where it is, and fetching it never installs a package.

scripts/install-corpus.sh runs for real in a copy of the project, with real ``dpkg-deb`` and tiny
.deb files built here; only ``apt-get`` (the network and the system's package database) is a stub
that serves those files and records how it was called.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

import tests.support.corpus as corpus

REPO = Path(__file__).resolve().parent.parent

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb (Debian/Ubuntu) not available")


# --------------------------------------------------------------------------------------------
# Where the corpus is read from


def test_env_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBQA_CORPUS_DIR", str(tmp_path / "manual"))
    assert corpus.corpus_dir() == tmp_path / "manual"


def test_default_is_the_project_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEBQA_CORPUS_DIR", raising=False)
    monkeypatch.setattr(corpus, "SYSTEM_DIR", tmp_path / "no-system-copy")
    assert corpus.corpus_dir() == REPO / "build" / "corpus" / "usr" / "share" / "doc" / "python3.11" / "html"


def test_system_copy_is_the_fallback_only_when_the_project_has_none(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEBQA_CORPUS_DIR", raising=False)
    system, project = tmp_path / "system", tmp_path / "project"
    write(system / "library" / "json.html", "<html></html>")
    monkeypatch.setattr(corpus, "SYSTEM_DIR", system)
    monkeypatch.setattr(corpus, "PROJECT_DIR", project)
    assert corpus.corpus_dir() == system
    write(project / "library" / "json.html", "<html></html>")
    assert corpus.corpus_dir() == project


def test_no_reader_hard_codes_the_system_path() -> None:
    readers = [*REPO.glob("tests/**/*.py"), *REPO.glob("benchmarks/*.py"), *REPO.glob("scripts/*"),
               *REPO.glob("demo/**/*"), REPO / "Makefile", REPO / ".ci" / "run"]
    # The absolute path only: inside the unpacked package (".../tree/usr/share/doc/...") it is fine.
    system_path = re.compile(r"(?<![\w/])/usr/share/doc/python3\.11")
    offenders = [str(p.relative_to(REPO)) for p in readers
                 if p.is_file() and p.name != "corpus.py" and p != Path(__file__)
                 and system_path.search(p.read_text(encoding="utf-8", errors="replace"))]
    assert offenders == []


# --------------------------------------------------------------------------------------------
# scripts/install-corpus.sh


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def build_deb(tmp: Path, package: str, files: dict[str, str], links: dict[str, str] | None = None) -> Path:
    """A minimal real .deb (dpkg-deb --build) holding ``files`` and relative symlinks ``links``."""
    root = tmp / f"src-{package}"
    for rel, text in files.items():
        write(root / rel, text)
    for rel, target in (links or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).symlink_to(target)
    write(root / "DEBIAN" / "control", f"Package: {package}\nVersion: 1.0\nArchitecture: all\n"
                                       "Maintainer: test <t@example.org>\nDescription: test\n")
    deb = tmp / "debs" / f"{package}_1.0_all.deb"
    deb.parent.mkdir(exist_ok=True)
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True,
                   capture_output=True)
    return deb


def executable(path: Path, text: str) -> None:
    write(path, textwrap.dedent(text))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the parts of the project the script uses: itself and tests/support/corpus.py."""
    copy = tmp_path / "project"
    (copy / "scripts").mkdir(parents=True)
    (copy / "tests" / "support").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "install-corpus.sh", copy / "scripts")
    shutil.copy(REPO / "tests" / "support" / "corpus.py", copy / "tests" / "support")
    (copy / "tests" / "__init__.py").touch()
    (copy / "tests" / "support" / "__init__.py").touch()
    return copy


def stub_apt(tmp: Path, *, knows_packages: bool, uid: int) -> Path:
    """``apt-get`` serving the built .debs on ``download`` (or failing like an un-updated apt), and ``id``."""
    bin_dir = tmp / "bin"
    executable(bin_dir / "apt-get", f"""\
        #!/bin/sh
        echo "$*" >> {tmp}/apt-calls
        if [ "$1" = download ] && {'true' if knows_packages else 'false'}; then
            cp {tmp}/debs/*.deb .
            exit 0
        fi
        echo "E: Unable to locate package python3.11-doc" >&2
        exit 100
        """)
    executable(bin_dir / "id", f"#!/bin/sh\necho {uid}\n")
    return bin_dir


def run_script(project: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "WEBQA_CORPUS_DIR"}
    env["PATH"] = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run([str(project / "scripts" / "install-corpus.sh")], capture_output=True, text=True,
                          env=env, timeout=120)


def manual_debs(tmp: Path) -> None:
    html = "usr/share/doc/python3.11/html"
    build_deb(tmp, "python3.11-doc", {f"{html}/library/json.html": "<html>json — JSON encoder</html>"},
              {f"{html}/_static/jquery.js": "../../../../javascript/jquery/jquery.js"})
    build_deb(tmp, "libjs-jquery", {"usr/share/javascript/jquery/jquery.js": "/* jQuery */"})
    build_deb(tmp, "libjs-underscore", {"usr/share/javascript/underscore/underscore.js": "/* underscore */"})


@pytest.mark.e2e
@needs_dpkg
def test_unpacks_the_manual_into_the_project_without_installing_anything(tmp_path: Path, project: Path) -> None:
    manual_debs(tmp_path)
    bin_dir = stub_apt(tmp_path, knows_packages=True, uid=1000)
    done = run_script(project, bin_dir)
    assert done.returncode == 0, done.stderr
    html = project / "build" / "corpus" / "usr" / "share" / "doc" / "python3.11" / "html"
    assert "JSON encoder" in (html / "library" / "json.html").read_text(encoding="utf-8")
    assert (html / "_static" / "jquery.js").read_text(encoding="utf-8") == "/* jQuery */"  # the symlink resolves
    calls = (tmp_path / "apt-calls").read_text(encoding="utf-8").splitlines()
    assert calls == ["download -q python3.11-doc libjs-jquery libjs-underscore"]  # no install, no update
    assert str(html) in done.stdout
    assert [p.name for p in (project / "build").iterdir()] == ["corpus"]  # the download folder is gone

    again = run_script(project, bin_dir)
    assert again.returncode == 0 and "already" in again.stdout
    assert len((tmp_path / "apt-calls").read_text(encoding="utf-8").splitlines()) == 1


@pytest.mark.e2e
@needs_dpkg
def test_non_root_with_unknown_package_says_what_to_do_in_one_line(tmp_path: Path, project: Path) -> None:
    bin_dir = stub_apt(tmp_path, knows_packages=False, uid=1000)
    done = run_script(project, bin_dir)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "E: Unable to locate package python3.11-doc" in line and "sudo apt-get update" in line
    assert line.endswith("the corpus tests will be skipped")
    assert "update" not in (tmp_path / "apt-calls").read_text(encoding="utf-8")
    assert not (project / "build" / "corpus").exists()


@pytest.mark.e2e
@needs_dpkg
def test_root_refreshes_the_package_lists_once_then_gives_up_in_one_line(tmp_path: Path, project: Path) -> None:
    bin_dir = stub_apt(tmp_path, knows_packages=False, uid=0)
    done = run_script(project, bin_dir)
    assert done.returncode == 1
    calls = (tmp_path / "apt-calls").read_text(encoding="utf-8").splitlines()
    assert [c.split()[0] for c in calls] == ["download", "update", "download"]
    assert not any(c.startswith("install") for c in calls)
    (error,) = done.stderr.splitlines()
    assert error.endswith("the corpus tests will be skipped")


@pytest.mark.e2e
@needs_dpkg
def test_make_corpus_skips_with_one_line_when_it_cannot_fetch(tmp_path: Path, project: Path) -> None:
    shutil.copy(REPO / "Makefile", project / "Makefile")
    bin_dir = stub_apt(tmp_path, knows_packages=False, uid=1000)
    env = {k: v for k, v in os.environ.items() if k != "WEBQA_CORPUS_DIR"}
    env["PATH"] = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    done = subprocess.run(["make", "-s", "corpus"], cwd=project, capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "will be skipped" in done.stderr
    assert "sudo" not in (tmp_path / "apt-calls").read_text(encoding="utf-8")


def test_ci_does_not_install_the_manual_package() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    installs = [line for line in ci.splitlines() if "apt-get install" in line]
    assert installs and not any("python3.11-doc" in line for line in installs)
