"""The files of a knowledge base read within bounds: traversal, links, bombs, caps."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from appliance.errors import ImportFailed
from appliance.lore.archive import Limits, from_archive, from_folder

LIMITS = Limits(max_files=10, max_bytes=10_000, max_file_bytes=5_000)


def _zip(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return out.getvalue()


def _tar(entries: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w:gz") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as t:  # type: ignore[call-overload]
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                t.addfile(entry)
            else:
                info = tarfile.TarInfo(entry[0])
                info.size = len(entry[1])
                t.addfile(info, io.BytesIO(entry[1]))
    return out.getvalue()


def test_a_zip_and_a_tar_gz_give_their_files_by_relative_path() -> None:
    files = {"a.md": b"# a", "sub/b.txt": b"b", "./c.txt": b"c"}
    for data in (_zip(files), _tar(list(files.items())), _tar(list(files.items()), mode="w")):
        got = from_archive(data, LIMITS)
        assert got.files == {"a.md": b"# a", "sub/b.txt": b"b", "c.txt": b"c"}


@pytest.mark.parametrize("name", ["../evil.md", "a/../../evil.md", "/etc/passwd", "C:/x.md", "a\\..\\b.md"])
def test_a_path_that_could_land_elsewhere_refuses_the_whole_archive(name: str) -> None:
    for data in (_zip({"ok.md": b"x", name: b"y"}), _tar([("ok.md", b"x"), (name, b"y")])):
        with pytest.raises(ImportFailed, match="nothing was stored") as caught:
            from_archive(data, LIMITS)
        assert caught.value.field == "source"


def test_links_and_devices_in_a_tar_are_refused() -> None:
    link = tarfile.TarInfo("doc.md")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with pytest.raises(ImportFailed, match="is a link"):
        from_archive(_tar([link]), LIMITS)
    device = tarfile.TarInfo("dev")
    device.type = tarfile.CHRTYPE
    with pytest.raises(ImportFailed, match="not a regular file"):
        from_archive(_tar([device]), LIMITS)


def test_a_symlink_in_a_zip_is_refused() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        info = zipfile.ZipInfo("link.md")
        info.external_attr = (0o120777) << 16
        z.writestr(info, "/etc/passwd")
    with pytest.raises(ImportFailed, match="is a link"):
        from_archive(out.getvalue(), LIMITS)


def test_a_zip_bomb_is_stopped_at_the_cap_whatever_its_header_claims() -> None:
    data = bytearray(_zip({"bomb.txt": b"0" * 1_000_000}))
    # The bomb lies: its local and central headers claim 10 bytes uncompressed.
    central = data.rfind(b"PK\x01\x02")
    data[central + 24 : central + 28] = (10).to_bytes(4, "little")
    with pytest.raises(ImportFailed, match=r"expands past|damaged"):
        from_archive(bytes(data), LIMITS)
    honest = _zip({"big.txt": b"0" * 1_000_000})  # a million zeros, a few kB compressed
    with pytest.raises(ImportFailed, match="over the limit"):
        from_archive(honest, LIMITS)


def test_too_many_files_or_bytes_in_all_refuse() -> None:
    with pytest.raises(ImportFailed, match="more than 10 files"):
        from_archive(_zip({f"{i}.md": b"x" for i in range(11)}), LIMITS)
    with pytest.raises(ImportFailed, match="in all"):
        from_archive(_zip({f"{i}.md": b"x" * 4000 for i in range(3)}), LIMITS)


def test_a_name_twice_is_refused() -> None:
    with pytest.raises(ImportFailed, match="twice"):
        from_archive(_tar([("a.md", b"1"), ("./a.md", b"2")]), LIMITS)


def test_hidden_files_are_set_aside_and_listed() -> None:
    got = from_archive(_zip({".git/config": b"x", "__MACOSX/a.md": b"y", "a.md": b"z"}), LIMITS)
    assert list(got.files) == ["a.md"] and sorted(got.hidden) == [".git/config", "__MACOSX/a.md"]


@pytest.mark.parametrize("data", [b"", b"hello", b"PK\x03\x04broken", b"\x1f\x8b\x08broken"])
def test_what_is_not_an_archive_is_a_clear_refusal(data: bytes) -> None:
    with pytest.raises(ImportFailed, match="nothing was stored"):
        from_archive(data, LIMITS)


def test_a_folder_gives_its_files_and_refuses_a_link_out(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# a")
    (root / "sub" / "b.txt").write_text("b")
    (root / "inside.md").symlink_to(root / "a.md")
    got = from_folder(root, LIMITS)
    assert got.files == {"a.md": b"# a", "inside.md": b"# a", "sub/b.txt": b"b"}
    (tmp_path / "secret.txt").write_text("s")
    (root / "out.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ImportFailed, match="links outside"):
        from_folder(root, LIMITS)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file_in_a_folder_is_listed(tmp_path: Path) -> None:
    (tmp_path / "locked.md").write_text("x")
    (tmp_path / "locked.md").chmod(0)
    got = from_folder(tmp_path, LIMITS)
    assert got.unreadable == [("locked.md", "permission denied")]
