"""The configs shipped with prover, and how `--config` finds them from any directory.

    prover train es --config configs/demo.toml   # ./configs/demo.toml if there is one, else the shipped demo.toml
    prover train es --config demo                 # the shipped demo.toml (unless ./demo exists)

The configs live in the package, `prover_cli/configs/*.toml`, so a `pip install` (not only a
checkout) has them (pyproject.toml's package data); that folder holds the one copy of each. In a
checkout, the repository's `configs/` is a link to it, where the README's commands name them.
Installed elsewhere, `--config configs/NAME.toml` from a directory without that file, `--config
NAME.toml` or `--config NAME` read the shipped `NAME.toml`; a file that exists at the path given is
always read first, so a config of your own by the same name wins. The resolved config a run
records starts `# resolved from <path>`, naming the file read.
"""

from __future__ import annotations

from pathlib import Path

from prover_cli.errors import ConfigError

SHIPPED_DIR = Path(__file__).resolve().parent / "configs"


def shipped_configs() -> dict[str, Path]:
    """Name (`demo`) -> path of every config shipped in the package, sorted by name."""
    return {path.stem: path for path in sorted(SHIPPED_DIR.glob("*.toml"))}


def shipped_name(path: str | Path) -> str | None:
    """The shipped config a `--config` value names when it is not a file: `configs/NAME.toml`,
    `NAME.toml` or `NAME` (relative, nothing more), if NAME is shipped; else None."""
    given = Path(path)
    parts = given.parts
    if given.is_absolute() or not parts or len(parts) > 2 or (len(parts) == 2 and parts[0] != "configs"):
        return None
    name = given.name[:-len(".toml")] if given.name.endswith(".toml") else given.name
    if len(parts) == 2 and not given.name.endswith(".toml"):
        return None
    return name if name in shipped_configs() else None


def resolve_config(path: str | Path) -> Path:
    """The file `--config path` reads: `path` itself when it exists, else the shipped config it
    names (`shipped_name`); neither: a ConfigError naming the path and the shipped names."""
    given = Path(path)
    if given.exists():
        return given
    name = shipped_name(given)
    if name is None:
        names = ", ".join(shipped_configs()) or "none"
        raise ConfigError(f"{given}: config file not found",
                          hint=f"pass a TOML file, or a config shipped with prover by its name: --config NAME ({names})")
    return shipped_configs()[name]
