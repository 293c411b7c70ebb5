"""One module per `spectower` command group; shared flag words and the duration option in ``options``.
May import every other package (lazily, so `--help` stays fast)."""
