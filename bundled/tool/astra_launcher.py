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

Only the standard library is used before the check passes, so any Python 3 can run the check.
"""
import json
import os
import platform
import sys

LIBS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "libs")
MANIFEST = "ASTRA_BUNDLE.json"


def bundle():
    """What `bundled/libs` holds (written by scripts/bundle-libs); None when there is none."""
    try:
        with open(os.path.join(LIBS, MANIFEST), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


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
    return None


def main(argv):
    strategy = os.environ.get("ASTRA_IMPORT_STRATEGY", "useBundled")
    if strategy not in ("useBundled", "fromEnvironment"):
        strategy = "useBundled"
    why = problem(strategy)
    if argv[:1] == ["--cli"]:
        if why is not None:
            sys.stderr.write("astra: %s\n" % why)
            return 2
        sys.path.insert(0, LIBS)
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
        sys.path.insert(0, LIBS)
    else:
        sys.path.append(LIBS)
    from astra_cuda.cli import main as astra_main
    return astra_main(["serve"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
