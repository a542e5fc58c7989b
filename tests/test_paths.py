"""kjax/paths.py on local folders: the same fsspec layer as gs:// (tested
against the emulator in test_gcs.py), with local writes moved into place and
results in the form the user gave."""
import os

import pytest

from kjax import paths


def test_the_file_layer_on_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths.write_json("a/x.json", {"k": "값"})                     # parents made
    assert paths.read_json("a/x.json") == {"k": "값"} and paths.isdir("a")
    assert os.listdir("a") == ["x.json"]                          # no temporary left
    assert paths.isfile(str(tmp_path / "a" / "x.json")) and not paths.exists("a/y.json")
    assert not paths.exists("") and not paths.isfile("") and paths.listdir("none") == []
    paths.write_text("a/b/y.txt", "둘")
    assert paths.listdir("a") == ["b", "x.json"] and paths.size("a/b/y.txt") == 3
    # A relative pattern lists relative paths, an absolute one absolute paths.
    assert paths.glob("a/*/*.txt") == [("a/b/y.txt", 3)]
    assert paths.glob(str(tmp_path / "a" / "*.json")) == [
        (str(tmp_path / "a" / "x.json"), len(paths.json_bytes({"k": "값"})))]
    assert paths.glob("a/b/y.txt") == [("a/b/y.txt", 3)] and paths.glob("a/none*") == []
    assert paths.walk_files("a") == ["b/y.txt", "x.json"]
    paths.copy_tree("a", "copy", skip=("b/",))
    assert paths.walk_files("copy") == ["x.json"]
    with paths.open_file("a/b/y.txt", "r", encoding="utf-8") as f:
        assert f.read() == "둘"
    paths.remove("a/x.json")
    assert paths.listdir("a") == ["b"]


def test_a_failed_local_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "meta.json"
    paths.write_text(str(target), "old")
    fs = type(paths._fs(str(target))[0])

    def broken(self, path, value, **kwargs):
        with open(path, "wb") as f:
            f.write(value[:2])
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(fs, "pipe_file", broken)
    with pytest.raises(OSError):
        paths.write_text(str(target), "new and longer")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["meta.json"]


def test_upload_and_download_are_whole_files(tmp_path):
    source = tmp_path / "src.bin"
    source.write_bytes(b"x" * 1000)
    paths.upload(str(source), str(tmp_path / "d" / "up.bin"))
    paths.download(str(tmp_path / "d" / "up.bin"), str(tmp_path / "e" / "down.bin"))
    assert (tmp_path / "e" / "down.bin").read_bytes() == b"x" * 1000
    paths.upload(str(source), str(tmp_path / "d" / "moved.bin"), move=True)
    assert not source.exists() and (tmp_path / "d" / "moved.bin").stat().st_size == 1000
    assert sorted(os.listdir(tmp_path / "d")) == ["moved.bin", "up.bin"]
