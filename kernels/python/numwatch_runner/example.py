"""python3 -m numwatch_runner.example [ARGS]: the example runner (example_runner.py,
next to this package) with the same arguments, e.g.

    python3 -m numwatch_runner.example --check rmsnorm.fwd --dtype bf16 --seed 42
    python3 -m numwatch_runner.example --check all --dtype all --count 2000 --summary
    python3 -m numwatch_runner.example            # speak protocol v1 on stdin/stdout
"""
import os
import sys

_here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _here not in sys.path:
    sys.path.insert(0, _here)

import example_runner  # noqa: E402  (found next to the package)

if __name__ == "__main__":
    sys.exit(example_runner.main(sys.argv[1:]))
