"""Profile `effectgate serve` at 16 MCP clients: the server under cProfile while B5's load runs.

Usage: PYTHONPATH=/abs/src python prof_mcp.py N OUT.prof [store-url]
Prints the server's CPU per request (cProfile inflates it) and writes the profile to OUT.prof.
(py-spy could not read this interpreter's version on this host.)
"""

import subprocess
import sys
import time

from effectgate.bench import b5
from effectgate.bench.common import Target


def main() -> None:
    n, out = int(sys.argv[1]), sys.argv[2]
    target = Target(sys.argv[3] if len(sys.argv) > 3 else None)
    real = subprocess.Popen

    def profiled(args, **kw):  # effectgate serve under cProfile
        if args[1:4] == ["-m", "effectgate", "serve"]:
            args = [args[0], "-m", "cProfile", "-o", out, "-m", *args[2:]]
        return real(args, **kw)

    subprocess.Popen = profiled  # type: ignore[misc]
    service = b5._service(target, "prof")
    with service as (url, token):
        b5.load_report(url, token, 16, 200, door="mcp")  # warm
        time.sleep(0.5)
        before = service.cpu_seconds()
        r = b5.load_report(url, token, 16, n, door="mcp")
        cpu = service.cpu_seconds() - before
        print(f"mcp {n / r['seconds']:.0f}/s server {1e6 * cpu / n:.0f} us/request")


if __name__ == "__main__":
    main()
