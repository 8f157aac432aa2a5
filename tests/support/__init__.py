"""What the tests share: tiny models, the CLI runner (cli.py), the tiers (tiers.py), and
the repository's root, for tests that read its files or start specchat in it."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
