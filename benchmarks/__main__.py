"""Run every benchmark in this folder in turn (`make bench`), or the ones named: python -m benchmarks codec spec."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def main(names: list[str]) -> int:
    scripts = sorted(HERE.glob("bench_*.py"))
    if names:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in names]
    failed = []
    for script in scripts:
        print(f"\n=== {script.stem} ===", flush=True)
        started = time.monotonic()
        code = subprocess.call([sys.executable, str(script)], cwd=HERE.parent)
        print(f"=== {script.stem}: exit {code} in {time.monotonic() - started:.0f} s", flush=True)
        if code:
            failed.append(script.stem)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
