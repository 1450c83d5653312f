"""The packages stay layered one way (../shared/STYLE.md "The shape of the house"): the adapters never import the
engine (the engine drives the adapters), nothing under the CLI imports the CLI package (the commands stand on
top of the runtime, outputs and jobs, not under them), and the web page (``tts_app.ui``) only builds the page. Read from the source with ``ast``, so every import counts:
module level, inside functions, and under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

import tts_app

PACKAGE_ROOT = Path(tts_app.__file__).parent

#: modules that are commands themselves, or the composition root that parses the app's flags: they may use the CLI
CLI_USERS = ("tts_app.cli", "tts_app.__main__", "tts_app.audio.cli", "tts_app.frontend.cli", "tts_app.server.main")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (``from X import Y`` gives X and X.Y), relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def modules() -> dict[str, set[str]]:
    return {module_name(p): imported_modules(p) for p in sorted(PACKAGE_ROOT.rglob("*.py"))}


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def offenders(importers: str, imported: str, allowed: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """{module under ``importers`` (not in ``allowed``): the modules of ``imported`` it imports}."""
    found = {}
    for name, imports in modules().items():
        if not within(name, importers) or any(within(name, a) for a in allowed):
            continue
        bad = sorted(m for m in imports if within(m, imported))
        if bad:
            found[name] = bad
    return found


def test_the_walk_sees_imports_at_every_level():
    imports = modules()
    assert "tts_app.engine.core" in imports and "tts_app.adapters.base" in imports
    # a function-level import (runtime.py imports the adapters' loader inside Runtime.load)
    assert "tts_app.adapters.load_adapter" in imports["tts_app.runtime"]
    # the commands do import the CLI package: the check below is not vacuous
    assert offenders("tts_app.cli", "tts_app.cli.args")


def test_the_adapters_import_nothing_from_the_engine():
    assert offenders("tts_app.adapters", "tts_app.engine") == {}


def test_the_page_starts_nothing_and_only_the_page_imports_gradio():
    """``tts_app.ui`` builds the page; the composition root (``tts_app.server.main``) starts the server, the model and
    the jobs and mounts the page."""
    assert offenders("tts_app.ui", "tts_app.server.main") == {}
    assert offenders("tts_app.ui", "uvicorn") == {}
    assert offenders("tts_app", "gradio", allowed=("tts_app.ui",)) == {}
    assert "tts_app.ui.mount.compose_ui" in modules()["tts_app.server.main"]


def test_only_commands_import_the_cli_package():
    found = offenders("tts_app", "tts_app.cli", allowed=CLI_USERS)
    assert found == {}, f"these import the CLI package, which stands on top of them: {found}"
    for lower in ("tts_app.jobs", "tts_app.outputs", "tts_app.runtime"):
        assert offenders(lower, "tts_app.cli") == {}, lower
