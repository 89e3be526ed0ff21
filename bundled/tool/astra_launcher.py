"""Starts Astra's language server from the VS Code extension.

The extension carries the server and every library it needs in `bundled/libs` (native ones built
for each supported Python, side by side), so the interpreter only has to be a supported CPython
on Linux (x86-64, or arm64 for that package): nothing is installed into it. `ASTRA_IMPORT_STRATEGY` says whose libraries win:
`useBundled` (the default) puts the bundled ones first; `fromEnvironment` puts them last, so an
Astra (and libraries) installed in the interpreter's environment are used. CuPy always comes from
the environment (it must match the machine's driver).

    python astra_launcher.py           run the language server on stdio
    python astra_launcher.py --check   print whether this interpreter can run it (JSON), exit 0
    python astra_launcher.py --cli ARGS...   the `astra` command (what "Astra: Install the astra
                                       command" puts on PATH)

In the .vsix the third-party libraries come packed in `bundled/libs.tar.xz` (a third of their zipped
size: scripts/bundle-libs --archive); the first start unpacks them once into `bundled/deps`, or, where
the extension's folder is read-only, into ~/.cache/astra (one folder per bundle digest); under a lock,
so two starts at once unpack once, and what a start killed mid-way left is removed by the next.

Only the standard library is used before the check passes, so any Python 3 can run the check.
"""
import fcntl
import glob
import json
import os
import platform
import shutil
import sys
import tarfile
import tempfile

BUNDLED = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBS = os.path.join(BUNDLED, "libs")
MANIFEST = "ASTRA_BUNDLE.json"


def bundle():
    """What `bundled/libs` holds (written by scripts/bundle-libs); None when there is none."""
    try:
        with open(os.path.join(LIBS, MANIFEST), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def unpacked(b):
    """The folder holding the archive's libraries, unpacked now if they are not yet; None when the
    bundle has no archive or its libraries are plain files in LIBS (a checkout). Raises ImportError
    (a Python built without lzma) or the error that stopped the unpacking; nothing is left half done."""
    a = b.get("archive")
    if not a or os.path.exists(os.path.join(LIBS, a["probe"])):
        return None
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    places = [os.path.join(BUNDLED, "deps"),
              os.path.join(cache, "astra", "libs-%s-%s" % (b.get("platform", ""), a["digest"]))]
    for place in places:
        if os.path.exists(os.path.join(place, a["probe"])):
            return place
    import lzma  # noqa: F401  (tarfile's "r:xz" needs it; a Python built without liblzma lacks it)
    error = None
    for place in places:
        parent = os.path.dirname(place)
        try:
            os.makedirs(parent, exist_ok=True)
            lock = os.open(os.path.join(parent, ".unpacking.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:   # a read-only extension folder: the next place
            error = e
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)   # a second start waits for the first, then finds its work done
            if not os.path.exists(os.path.join(place, a["probe"])):
                unpack(os.path.join(BUNDLED, a["name"]), place)
            return place
        finally:
            os.close(lock)
    raise error if error else OSError("nowhere to unpack the libraries")


def unpack(archive, place):
    """Unpack `archive` into a temporary folder beside `place`, then rename it into place (a
    folder there is complete). The caller holds the lock, so any other temporary folder is what a
    start killed mid-way left: removed first."""
    parent = os.path.dirname(place)
    for stale in glob.glob(os.path.join(parent, ".unpacking-*")):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix=".unpacking-", dir=parent)
    try:
        with tarfile.open(archive, "r:xz") as tar:
            if hasattr(tarfile, "data_filter"):   # 3.11.4+: nothing outside tmp, no devices or links out
                tar.extractall(tmp, filter="data")
            else:
                tar.extractall(tmp)
        if os.path.exists(place):   # a folder without the libraries (damaged by hand): replaced
            shutil.rmtree(place)
        os.rename(tmp, place)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def problem(strategy):
    """Why this interpreter cannot run the server with `strategy`, or None."""
    here = "%d.%d" % sys.version_info[:2]
    if sys.implementation.name != "cpython":
        return "Astra needs CPython; %s is %s" % (sys.executable, sys.implementation.name)
    b = bundle()
    if b is None:
        if strategy == "useBundled":
            return ("this build of the extension carries no bundled libraries: set astra.server.importStrategy "
                    "to fromEnvironment and install astra-cuda into the interpreter")
        return None
    machine = {"linux-x64": "x86_64", "linux-arm64": "aarch64"}.get(b.get("platform"), "x86_64")
    if (sys.platform, platform.machine()) != ("linux", machine):
        return "this Astra package is for Linux %s (this is %s %s): install the %s package" % (
            machine, sys.platform, platform.machine(), "linux-arm64" if platform.machine() == "aarch64" else "linux-x64")
    if here not in b["python"]:
        return ("Astra needs Python %s; %s is Python %s: choose another interpreter with the setting "
                "astra.server.python" % (" or ".join(b["python"]), sys.executable, here))
    try:
        unpacked(b)
    except ImportError:
        return ("%s was built without the lzma module, which unpacks Astra's libraries: choose another "
                "interpreter with the setting astra.server.python" % sys.executable)
    except Exception as e:   # OSError (disk full), TarError, EOFError and LZMAError (a damaged archive)
        return "could not unpack Astra's libraries (%s): %s" % (os.path.join(BUNDLED, b["archive"]["name"]), e)
    return None


def library_path():
    """The bundle's sys.path entries: LIBS, then where its archive was unpacked (if it has one)."""
    b = bundle()
    deps = unpacked(b) if b else None
    return [LIBS] + ([deps] if deps else [])


def main(argv):
    strategy = os.environ.get("ASTRA_IMPORT_STRATEGY", "useBundled")
    if strategy not in ("useBundled", "fromEnvironment"):
        strategy = "useBundled"
    why = problem(strategy)
    if argv[:1] == ["--cli"]:
        if why is not None:
            sys.stderr.write("astra: %s\n" % why)
            return 2
        sys.path[0:0] = library_path()
        from astra_cuda.cli import main as astra_main
        return astra_main(argv[1:])
    if "--check" in argv:
        print(json.dumps({"ok": why is None, "message": why or "", "python": sys.executable,
                          "version": "%d.%d.%d" % sys.version_info[:3], "strategy": strategy}))
        return 0
    if why is not None:
        sys.stderr.write("astra: %s\n" % why)
        return 3
    if strategy == "useBundled":
        sys.path[0:0] = library_path()
    else:
        sys.path.extend(library_path())
    from astra_cuda.cli import main as astra_main
    return astra_main(["serve"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
