"""Start the B5 service, drive MCP load, py-spy the server."""
import subprocess, sys, time, os
from effectgate.bench import b5
from effectgate.bench.common import Target

def main():
    door = sys.argv[1] if len(sys.argv) > 1 else "mcp"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    out = sys.argv[3] if len(sys.argv) > 3 else f"/tmp/h5/prof-{door}.txt"
    store = os.environ.get("STORE")
    target = Target(store)
    svc = b5._service(target, "prof")
    with svc as (url, token):
        b5.load_report(url, token, 16, 200, door=door)  # warm
        spy = subprocess.Popen(["/work/venv/bin/py-spy", "record", "--pid", str(svc._proc.pid), "-r", "200", "-f", "raw", "-o", out, "--nonblocking", "--gil"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        c0 = svc.cpu_seconds(); t0 = time.perf_counter()
        r = b5.load_report(url, token, 16, n, door=door)
        print(door, "actions/s", n / r["seconds"], "cpu us/req", 1e6 * (svc.cpu_seconds() - c0) / n)
        spy.send_signal(2); spy.wait()

if __name__ == '__main__':
    main()
