"""Roots.contains: the same answer as resolving the path with os.path.realpath."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from acp_agent.paths import Roots


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
    (root / "dangling-out").symlink_to(outside / "not-yet-written")
    (root / "relative-link").symlink_to("dir/file.txt")
    (tmp_path / "alias").symlink_to(root)
    return root


def by_realpath(path: str, root: str) -> bool:
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    return real == real_root or real.startswith(real_root + os.sep)


PARTS = [
    "dir",
    "file.txt",
    "link-to-dir",
    "link-out",
    "chain",
    "dangling",
    "dangling-out",
    "relative-link",
    "missing",
    "secret",
    "new",
    "..",
    ".",
]


@pytest.mark.parametrize("given", ["root", "alias"])
def test_contains_agrees_with_realpath_for_every_mix_of_up_to_four_parts(
    tmp_path: Path, given: str
) -> None:
    # The roots check rests on this: a path the walk below the root judged differently
    # from realpath could be let outside the session's roots. Every sequence, not a
    # sample; the root is named as itself and through a link to it.
    make_tree(tmp_path)
    root = str(tmp_path / given)
    roots = Roots((root,))
    inside = outside = 0
    for length in range(1, 5):
        for parts in itertools.product(PARTS, repeat=length):
            path = os.path.normpath(os.path.join(root, *parts))
            expected = by_realpath(path, root)
            assert roots.contains(path) is expected, parts
            inside += expected
            outside += not expected
    assert inside > 1000 and outside > 1000


def test_a_link_out_of_the_root_is_refused_however_deep(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    roots = Roots((str(root),))
    assert roots.contains(str(root / "dir" / "file.txt"))
    assert roots.contains(str(root / "dir" / "not-yet-written.txt"))
    assert not roots.contains(str(root / "link-out" / "secret"))
    assert not roots.contains(str(root / "link-out" / "new" / "deeper"))
    assert not roots.contains(str(root / "dangling-out"))
    assert not roots.contains(str(tmp_path / "outside" / "secret"))


@pytest.mark.parametrize(("now_at", "inside"), [("outside", False), ("moved", True)])
def test_a_root_moved_away_and_named_again_through_a_link(
    tmp_path: Path, now_at: str, inside: bool
) -> None:
    # The root is the directory it was when first checked: a link at its name to another
    # directory is not trusted; a link to the root itself, moved, still is.
    root = make_tree(tmp_path)
    roots = Roots((str(root),))
    assert roots.contains(str(root / "dir" / "file.txt"))
    root.rename(tmp_path / "moved")
    root.symlink_to(tmp_path / now_at)
    assert roots.contains(str(root / "new.txt")) is inside
    assert roots.contains(str(root / "dir")) is inside


def test_any_of_several_roots_and_a_missing_root(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    extra = tmp_path / "outside"
    roots = Roots((str(root), str(tmp_path / "gone"), str(extra)))
    assert roots.contains(str(root / "link-out" / "secret"))  # a link into another root
    assert roots.contains(str(extra / "secret"))
    assert roots.contains(str(tmp_path / "gone" / "file"))  # as realpath would say
    assert not roots.contains(str(tmp_path / "elsewhere"))


def test_the_file_system_root(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    roots = Roots(("/",))
    assert roots.contains(str(root / "link-out" / "secret"))
    assert roots.contains("/")
