"""The tests marked `soak`: long fault runs and whole-suite conformance runs that `make test`
leaves out to stay within its budget (20 minutes on 2 cores). They assert what they assert in
`make test`'s terms; here they run in full and their times are printed."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0",
                            "-m", "soak", "tests"], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
