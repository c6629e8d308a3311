import sys, time, os
from effectgate.bench import b5
from effectgate.bench.common import Target

def main():
    door, n = sys.argv[1], int(sys.argv[2])
    target = Target(os.environ.get("STORE"))
    svc = b5._service(target, "ab")
    with svc as (url, token):
        b5.load_report(url, token, 16, 200, door=door)
        c0 = svc.cpu_seconds()
        r = b5.load_report(url, token, 16, n, door=door)
        lat = sorted(r["lat"])
        print(f"{door} {n / r['seconds']:.0f}/s cpu_us={1e6 * (svc.cpu_seconds() - c0) / n:.0f} p50_ms={1000*lat[len(lat)//2]:.1f}", flush=True)

if __name__ == "__main__":
    main()
