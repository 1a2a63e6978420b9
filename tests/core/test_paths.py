"""real_path: the same answer as os.path.realpath, for every kind of path."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from acp_agent.session import real_path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path)


def make_tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "dir").mkdir(parents=True)
    (root / "dir" / "file.txt").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    (root / "link-to-dir").symlink_to(root / "dir")
    (root / "link-out").symlink_to(outside)
    (root / "chain").symlink_to(root / "link-to-dir")
    (root / "dangling").symlink_to(root / "missing")
    (root / "relative-link").symlink_to("dir/file.txt")
    return root


@pytest.mark.parametrize(
    "relative",
    [
        "dir/file.txt",
        "dir",
        "link-to-dir/file.txt",
        "link-out/secret",
        "chain/file.txt",
        "dangling",
        "relative-link",
        "dir/../dir/file.txt",
        "does/not/exist.txt",
        "link-out/not-yet-written",
        "dir/new.txt",
        "link-to-dir/new.txt",
        "dangling/child",
        "missing/../dir/file.txt",
        "missing/../link-out/new",
        "dir/file.txt/below-a-file",
        "missing/.",
    ],
)
def test_real_path_matches_realpath(tree: Path, relative: str) -> None:
    path = os.path.join(tree, relative)
    assert real_path(path) == os.path.realpath(path)


PARTS = [
    "dir",
    "file.txt",
    "link-to-dir",
    "link-out",
    "chain",
    "dangling",
    "relative-link",
    "missing",
    "new",
    "..",
    ".",
]


def test_real_path_matches_realpath_for_every_mix_of_up_to_four_parts(tmp_path: Path) -> None:
    # The roots check rests on this: a path the fast route named differently from realpath
    # could be let outside the session's roots. Every sequence, not a sample: the cases
    # that differ are few (say missing/../link-out/new).
    root = make_tree(tmp_path)
    for length in range(1, 5):
        for parts in itertools.product(PARTS, repeat=length):
            path = os.path.join(root, *parts)
            assert real_path(path) == os.path.realpath(path), parts
