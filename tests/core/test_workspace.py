"""`.astra/` at the workspace root ignores itself, like other tools' cache folders."""
import subprocess

import pytest

from astra_cuda import workspace


def test_astra_dir_is_created_with_its_own_gitignore(tmp_path):
    (tmp_path / ".git").mkdir()
    f = tmp_path / "k.cu"
    f.write_text("__global__ void k() {}\n")
    assert not workspace.astra_dir(f).exists()          # reading never creates it
    workspace.pin(f, "k", f.read_text())
    ignore = tmp_path / ".astra" / ".gitignore"
    assert ignore.read_text().splitlines()[-1] == "*"


def test_git_sees_nothing_under_astra(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    f = tmp_path / "k.cu"
    f.write_text("__global__ void k() {}\n")
    workspace.pin(f, "k", f.read_text())
    workspace.save_original(f, f.read_text())
    out = subprocess.run(["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=all"],
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["??", "k.cu"]


def test_an_existing_folder_is_left_as_the_user_has_it(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".astra").mkdir()
    f = tmp_path / "k.cu"
    f.write_text("__global__ void k() {}\n")
    workspace.pin(f, "k", f.read_text())
    assert not (tmp_path / ".astra" / ".gitignore").exists()


def test_nothing_is_read_or_written_through_a_link(tmp_path):
    """A cloned repository's `.astra` may point anywhere: Astra neither writes there nor reads a
    pin from there, and a pin entry names a baseline, never a path."""
    from astra_cuda.errors import AstraError
    proj, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    (proj / ".git").mkdir(parents=True)
    elsewhere.mkdir()
    f = proj / "k.cu"
    f.write_text("__global__ void k() {}\n")
    workspace.pin(tmp_path / "elsewhere" / "k.cu", "k", f.read_text())  # a valid pin over there
    (proj / ".astra").symlink_to(elsewhere / ".astra")
    assert workspace.pinned(f, "k") is None
    with pytest.raises(AstraError, match="symbolic link"):
        workspace.pin(f, "k", f.read_text())
    (proj / ".astra").unlink()
    (proj / ".astra" / "baselines").mkdir(parents=True)
    (proj / ".astra" / "pins.json").write_text('{"k.cu::k": {"file": "k.cu", "digest": "../../elsewhere/x"}}')
    assert workspace.pinned(f, "k") is None
    (proj / ".astra" / "pins.json").unlink()
    (proj / ".astra" / "pins.json").symlink_to(elsewhere / ".astra" / "pins.json")
    assert workspace.pinned(f, "k") is None


def test_a_pin_reads_back_without_a_git_folder(tmp_path):
    f = tmp_path / "k.cu"
    f.write_text("__global__ void k() {}\n")
    workspace.pin(f, "k", f.read_text())
    assert workspace.pinned(f, "k").text == f.read_text()


def test_an_ncu_report_is_kept_whole_beside_the_file_and_a_link_refused(tmp_path):
    from astra_cuda import api
    from astra_cuda.profiler.results import Profile
    (tmp_path / ".git").mkdir()
    f = tmp_path / "k.cu"
    f.write_text("__global__ void k() {}\n")
    p = Profile(kernel="ns::k<float>", backend="gpu", measured=True)
    p.ncu_report = b"\x00report"
    api.keep_ncu_report(p, str(f))
    kept = tmp_path / ".astra" / "profiles"
    assert p.ncu_report is None and p.errors == []
    assert [x.name for x in kept.iterdir()] == [p.ncu_report_path.rpartition("/")[2]]
    assert p.ncu_report_path.startswith(str(kept / "ns__k_float_-")) and kept.joinpath(
        p.ncu_report_path).read_bytes() == b"\x00report"
    other = tmp_path / "elsewhere"
    other.mkdir()
    (tmp_path / ".astra" / "profiles").rename(tmp_path / "old")
    (tmp_path / ".astra" / "profiles").symlink_to(other)
    p.ncu_report = b"again"
    api.keep_ncu_report(p, str(f))
    assert p.ncu_report is None and "not kept" in p.errors[0] and list(other.iterdir()) == []
