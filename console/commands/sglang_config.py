"""`spectower sglang-config`: write SGLang's adaptive config for the knob and print the launch flags."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from ..errors import fail


def sglang_config(
    steps: int = typer.Option(..., "--steps", help="The working draft step N (drafting runs N steps)."),
    max_bs: int = typer.Option(
        48, "--max-running-requests", help="SGLang's --max-running-requests; the bands reach up to it."
    ),
    old_max_bs: int | None = typer.Option(
        None, "--max-bs", hidden=True, help="old name of --max-running-requests"
    ),
    out: Path = typer.Option(
        Path("spectower-adaptive-config.json"), "--out", help="Where to write the adaptive config JSON."
    ),
) -> None:
    """Write SGLang's --speculative-adaptive-config for spectower and print the launch flags."""
    from ...control.sglang_config import (
        PLUGIN_INSTALL_HINT,
        SglangConfigError,
        band_keys,
        build_adaptive_config,
        launch_flags,
        plugin_env,
        write_config,
    )

    if old_max_bs is not None:  # --max-bs is the knob everywhere else; kept here for old scripts
        max_bs = old_max_bs
    try:
        config = build_adaptive_config(steps, max_bs)
        flags = launch_flags(steps, max_bs, out.resolve())
        path = write_config(out, config)
    except SglangConfigError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"--out {out}: {exc.strerror or exc}")
    bands = ", ".join(str(key) for key in band_keys(max_bs))
    typer.echo(f"# wrote {path}: bands {bands}, candidate_steps [0, {steps}] in each")
    typer.echo(f"# the SGLang environment needs the plugin: {PLUGIN_INSTALL_HINT}")
    for name, value, why in plugin_env():
        typer.echo(f"#   {name}={value}  ({why})")
    typer.echo("# launch flags (add --model-path and --speculative-draft-model-path):")
    typer.echo(shlex.join(flags))
