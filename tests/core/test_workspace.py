"""`.astra/` at the workspace root ignores itself, like other tools' cache folders."""
import subprocess

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
