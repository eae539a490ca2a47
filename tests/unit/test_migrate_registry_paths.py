"""Registered directories are removed whole, symlinks to directories included (a rootfs tree
has bin -> usr/bin); the link target outside the tree is never touched (no root)."""

from migrate.core.registry import teardown_state


def test_teardown_removes_tree_with_symlinks_to_dirs(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    tree = tmp_path / "run-criu"
    (tree / "rootfs" / "usr" / "bin").mkdir(parents=True)
    (tree / "rootfs" / "usr" / "bin" / "busybox").write_text("x")
    (tree / "rootfs" / "bin").symlink_to("usr/bin")
    (tree / "rootfs" / "escape").symlink_to(outside)
    (tree / "rootfs" / "dangling").symlink_to("nowhere")
    assert teardown_state({"paths": [str(tree)]}) == []
    assert not tree.exists()
    assert (outside / "keep").read_text() == "x"
