"""_bootstrap.py — what every tools/ and bench/ script imports first, so that it runs both as
a file (`python3 tools/bench.py`, the seed guide's form) and as a module
(`python -m tools.bench`) from the repository root. Standard library only.

A script begins with these lines (after `from __future__ import annotations`):

    if __package__ in (None, ""):  # run as a file: python3 tools/NAME.py
        import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tools import _bootstrap  # noqa: F401  the repository importable, a missing package named

The first puts the repository root ahead of the script's own folder (where Python put the
script's folder: tools/bench.py would otherwise shadow the bench package). Importing this
module then

- takes the script's own folder (tools/ or bench/) off sys.path, so none of its files is
  importable under a bare name (`bench`, `corpus`, ...) in place of the packages;
- installs a sys.excepthook that turns an uncaught ModuleNotFoundError for a third-party
  package (numpy, torch, ...) into one message naming the package, the interpreter that lacks
  it and the project's venv (`.venv/bin/python ...`, made by `make deps`) instead of a
  traceback. Any other exception goes to the previous hook unchanged. It acts only when the
  main program is a tools/ or bench/ script: a test or another program importing a tool keeps
  its own error handling.
"""

from __future__ import annotations

import os
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
# the repository's own top-level packages: a missing one is a path problem, not a package to install
OWN_PACKAGES = ("tools", "bench", "tests")
# import name -> pip name, where they differ (tools/requirements*.txt)
PIP_NAMES = {"llama_cpp": "llama-cpp-python", "yaml": "PyYAML", "google": "protobuf",
             "sentencepiece": "sentencepiece", "PIL": "Pillow", "sklearn": "scikit-learn"}


def _main_script():
    """(relative path, module name or None) of the running tools/bench script, or None."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path:
        return None
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if os.path.dirname(folder) != ROOT or os.path.basename(folder) not in ("tools", "bench"):
        return None
    spec = getattr(main, "__spec__", None)
    return os.path.relpath(path, ROOT), (spec.name if spec is not None else None)


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a or ".", b)
    except OSError:
        return False


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def missing_package_message(name: str, script: str, module: str | None, argv: list[str]) -> str:
    top = name.split(".")[0]
    pip = PIP_NAMES.get(top, top)
    args = shlex.join(argv[1:])
    if len(args) > 120:
        args = args[:117] + "..."
    form = f"-m {module}" if module else _shown(os.path.join(ROOT, script))
    here = f"{sys.executable} (Python {sys.version.split()[0]})"
    in_venv = os.path.abspath(sys.prefix) == os.path.join(ROOT, ".venv")
    if in_venv:
        fix = (f"the project's venv lacks it: run `make deps` (it installs tools/requirements*.txt "
               f"into .venv), or `{_shown(VENV_PYTHON)} -m pip install {pip}`")
    else:
        fix = (f"run it with the project's venv, which has the packages: "
               f"{_shown(VENV_PYTHON)} {form}{' ' + args if args else ''}")
        if not os.path.exists(VENV_PYTHON):
            fix += "\n  (there is no .venv yet: `make deps` creates it from tools/requirements*.txt)"
        else:
            fix += "\n  (`make deps` creates and updates .venv from tools/requirements*.txt)"
    return f"{script}: needs the Python package '{pip}' (import {name}), missing from {here}\n  {fix}"


def _install() -> None:
    found = _main_script()
    if found is None:
        return
    script, module = found
    folder = os.path.join(ROOT, os.path.dirname(script))
    sys.path[:] = [p for p in sys.path if not _same_dir(p, folder)]
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    previous = sys.excepthook

    def hook(kind, value, tb):
        name = getattr(value, "name", None) if isinstance(value, ModuleNotFoundError) else None
        if name and name.split(".")[0] not in OWN_PACKAGES:
            sys.stderr.write(missing_package_message(name, script, module, sys.argv) + "\n")
            return  # the interpreter still exits with status 1, as for any uncaught exception
        previous(kind, value, tb)

    sys.excepthook = hook


_install()
