"""Files written whole or not at all, one flattener, and errors that carry their exit code."""

import errno
import threading
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.kit.cli import run
from {{ cookiecutter.package_name }}.kit.errors import KitError
from {{ cookiecutter.package_name }}.kit.files import flatten, write_atomically


def test_a_failed_write_leaves_the_previous_file_whole_and_no_partial_one(tmp_path, monkeypatch):
    path = tmp_path / "trackers.json"
    write_atomically(path, "the good one")
    real_write_text = Path.write_text

    def disk_full(self: Path, text: str, *args: object, **kwargs: object) -> int:
        real_write_text(self, text[: len(text) // 2])
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(path, "a new one, cut short")
    assert path.read_text() == "the good one"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_two_writers_of_one_file_at_once_never_leave_it_torn(tmp_path):
    """Two sweep workers that end together both write best.yaml: any read sees one of them whole."""
    path = tmp_path / "best.yaml"
    contents = ["a" * 100_000, "b" * 150_000]
    write_atomically(path, contents[0])
    errors: list[BaseException] = []

    def writer(content: str) -> None:
        try:
            for _ in range(50):
                write_atomically(path, content)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(content,)) for content in contents]
    for thread in threads:
        thread.start()
    reads = set()
    while any(thread.is_alive() for thread in threads):
        reads.add(path.read_text())
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert reads <= set(contents), "a read saw a file that was neither writer's whole content"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_flatten_names_every_setting_by_its_dotted_path():
    settings = {"model": {"network": {"init_args": {"width": 16}}}, "callbacks": [{"a": 1}], "empty": {}}
    assert flatten(settings) == {"model.network.init_args.width": 16, "callbacks.0.a": 1, "empty": {}}
    assert flatten({"shape": (1, 8, 8)}, sequences=False) == {"shape": (1, 8, 8)}


class OtherCodeError(KitError):
    exit_code = 3


@pytest.mark.parametrize(("error", "code"), [(KitError, 2), (OtherCodeError, 3)])
def test_a_kit_error_ends_in_one_line_with_its_own_exit_code(error, code, capsys):
    def refusing_cli(**kwargs: object) -> None:
        raise error("--data.path=x: no such file.\nPass an existing one.")

    with pytest.raises(SystemExit) as stop:
        run(refusing_cli)  # type: ignore[arg-type]
    assert stop.value.code == code
    assert capsys.readouterr().err == "error: --data.path=x: no such file. Pass an existing one.\n"
