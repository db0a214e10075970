"""The total disk bound: a toolkit's directory as a loop-mounted filesystem of a fixed size.

Real mounts (a root gateway's case); skipped where this machine cannot make them.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from appliance.children.disk import DiskBound, probe_disk

pytestmark = pytest.mark.skipif(probe_disk() != "", reason=f"no disk bound here: {probe_disk()}")


def test_a_bounded_directory_keeps_its_content_refuses_past_its_size_and_is_unmounted_at_release(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "kept.txt").write_text("written before the bound")
    disk = DiskBound(tmp_path / ".disk", 8)
    try:
        disk.ensure("p.kit", "work", work)
        disk.ensure("p.kit", "work", work)  # once mounted, left as it is
        assert os.path.ismount(work)
        assert (work / "kept.txt").read_text() == "written before the bound"
        assert sorted(p.name for p in work.iterdir()) == ["kept.txt"]  # no lost+found
        with pytest.raises(OSError) as full:
            for i in range(16):
                (work / f"f{i}").write_bytes(b"x" * (1 << 20))
        assert full.value.errno == errno.ENOSPC
        # sparse: the image holds what was written, not its whole size up front
        assert (tmp_path / ".disk" / "p.kit.work.img").stat().st_blocks * 512 < 16 << 20
    finally:
        disk.release()
    assert not os.path.ismount(work)
    assert list(work.iterdir()) == []  # beneath the mount: nothing stale was left
    again = DiskBound(tmp_path / ".disk", 8)
    try:
        again.ensure("p.kit", "work", work)  # the same image, mounted again: its content is back
        assert (work / "kept.txt").read_text() == "written before the bound"
    finally:
        again.release()
