"""`spectower demo`: the simulator, collector, learning policy, load walker and console on one machine."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import fail
from .options import run_duration_option


def demo(
    profile: str = typer.Option(
        "glm5-nvfp4-8x-rtx-pro-6000", "--profile", help="Simulator profile: a shipped name or a JSON path."
    ),
    port: int = typer.Option(8501, "--port", help="Console port (the next free one if taken)."),
    db: Path = typer.Option(
        Path("spectower-demo/spectower.db"),
        "--db",
        help="SQLite file; logs, pids and the demo's admin key go in its folder. A second run reuses it.",
    ),
    duration: float | None = run_duration_option("Ctrl-C"),
) -> None:
    """Run the whole thing locally against the simulator, no GPU needed (Ctrl-C stops every child)."""
    from ...simulator.profile import ProfileError, load_profile
    from ..demo.ports import PortError
    from ..demo.run import DemoConfig, run_demo

    try:
        load_profile(profile)  # a bad profile is refused here, not as a dead child
    except (ProfileError, ValueError) as exc:
        fail(str(exc))
    if "://" in str(db):
        fail(f"--db: the demo takes a SQLite file path, got {str(db)!r}")
    if db.exists() and db.is_dir():
        fail(f"--db: {str(db)!r} is a folder; give a file path such as {db / 'spectower.db'}")
    if Path(profile).exists():  # the children run from the checkout: a relative path must not move
        profile = str(Path(profile).resolve())
    config = DemoConfig(profile=profile, console_port=port, db_path=db, duration_s=duration)

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        code = run_demo(config, say, cwd=Path(__file__).resolve().parents[2])
    except (PortError, OSError) as exc:
        fail(str(exc))
    raise typer.Exit(code)
