"""The set-up in dev.py: which installer it picks, and what it tells uv about pip's settings."""

import os
import stat
from pathlib import Path

import pytest

import dev

LISTING = """\
:env:.cert='/from/the/environment.crt'
:env:.find-links='/opt/wheels'
global.cert='/from/a/file.crt'
global.index-url='https://mirror.example/simple'
global.extra-index-url='file:///opt/extra/simple'
"""


def test_pip_config_reads_every_setting_and_a_variable_wins_over_a_file() -> None:
    assert dev.parse_pip_config(LISTING) == {
        "cert": "/from/the/environment.crt",
        "find-links": "/opt/wheels",
        "index-url": "https://mirror.example/simple",
        "extra-index-url": "file:///opt/extra/simple",
    }


def test_uv_gets_pips_index_and_certificates_but_not_its_extra_indexes() -> None:
    environment = dev.uv_environment(dev.parse_pip_config(LISTING), {"HOME": "/root"})
    assert environment == {"HOME": "/root",
                           "UV_DEFAULT_INDEX": "https://mirror.example/simple",
                           "SSL_CERT_FILE": "/from/the/environment.crt"}


def test_uv_settings_already_in_the_environment_are_left_alone() -> None:
    given = {"UV_INDEX_URL": "https://chosen.example/simple", "SSL_CERT_FILE": "/chosen.crt"}
    assert dev.uv_environment(dev.parse_pip_config(LISTING), given) == given


def test_no_pip_settings_leave_uv_on_its_defaults() -> None:
    assert dev.uv_environment(dev.parse_pip_config(""), {"HOME": "/root"}) == {"HOME": "/root"}


def fake_uv(folder: Path, exit_status: int) -> Path:
    """A stand-in uv executable in folder/bin that exits with the given status."""
    binary = folder / "bin" / "uv"
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!/bin/sh\necho 'uv {dev.UV_VERSION}'\nexit {exit_status}\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


@pytest.mark.skipif(os.name == "nt", reason="the stand-in uv is a shell script")
def test_a_uv_that_runs_is_found_and_one_that_fails_is_not(tmp_path: Path) -> None:
    assert dev.uv_binary(tmp_path / "working") is None  # nothing installed there yet
    working = fake_uv(tmp_path / "working", 0)
    fake_uv(tmp_path / "broken", 1)
    assert dev.uv_binary(tmp_path / "working") == working
    assert dev.uv_binary(tmp_path / "broken") is None


def test_where_uv_cannot_be_installed_set_up_says_so_and_falls_back_to_pip(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    commands: list[tuple[str, ...]] = []

    def failing_run(*command: object, environment: object = None) -> int:
        commands.append(tuple(str(part) for part in command))
        return 1  # pip could not install uv

    monkeypatch.setattr(dev, "run", failing_run)
    monkeypatch.setattr(dev, "UV_HOME", tmp_path / "uv")
    monkeypatch.setattr(dev.shutil, "which", lambda name: None)
    monkeypatch.delenv(dev.INSTALLER_VARIABLE, raising=False)
    assert dev.install_with_uv() is False
    assert "installing with pip instead" in capsys.readouterr().err
    assert [command[-1] for command in commands] == [f"uv=={dev.UV_VERSION}"]


def test_the_installer_variable_makes_set_up_skip_uv(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_run(*command: object, environment: object = None) -> int:
        raise AssertionError(f"ran {command}")

    monkeypatch.setattr(dev, "run", no_run)
    monkeypatch.setenv(dev.INSTALLER_VARIABLE, "pip")
    assert dev.install_with_uv() is False


def test_the_full_suite_names_what_it_lacks_and_runs_nothing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def no_run(*command: object, environment: object = None) -> int:
        raise AssertionError(f"ran {command}")

    monkeypatch.setattr(dev, "set_up", lambda: None)
    monkeypatch.setattr(dev, "run", no_run)
    monkeypatch.setattr(dev, "venv_quarto", lambda: None)
    monkeypatch.setattr(dev.shutil, "which", lambda name: None)
    monkeypatch.delenv("CHROMIUM", raising=False)
    assert dev.main(["test", "--full"]) == 2
    said = capsys.readouterr().err
    assert all(needed in said for needed in ("Quarto", "Chromium", "npm"))


def test_the_full_suite_tells_pytest_to_render_and_finds_quarto(
        monkeypatch: pytest.MonkeyPatch) -> None:
    environments: list[dict[str, str]] = []

    def record(*command: object, environment: dict[str, str] | None = None) -> int:
        assert environment is not None
        environments.append(environment)
        return 0

    monkeypatch.setattr(dev, "set_up", lambda: None)
    monkeypatch.setattr(dev, "run", record)
    monkeypatch.setattr(dev.shutil, "which", lambda name: f"/opt/{name}/bin/{name}")
    monkeypatch.delenv(dev.FULL_VARIABLE, raising=False)
    assert dev.main(["test"]) == 0
    assert all(dev.FULL_VARIABLE not in environment for environment in environments)
    environments.clear()
    assert dev.main(["test", "--full"]) == 0
    assert [environment[dev.FULL_VARIABLE] for environment in environments] == ["1"] * 3
    assert environments[-1]["PATH"].startswith(f"/opt/quarto/bin{os.pathsep}")
