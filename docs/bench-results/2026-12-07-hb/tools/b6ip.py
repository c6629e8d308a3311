"""Run B6 in process only at A agents on PG; print figure and postgres server CPU per action."""
import os, sys, json, time
from effectgate.bench import b6
from effectgate.bench.common import Target

def pg_cpu():
    tot = 0
    for pid in os.listdir('/proc'):
        if not pid.isdigit(): continue
        try:
            with open(f'/proc/{pid}/comm') as f:
                if f.read().strip() != 'postgres': continue
            with open(f'/proc/{pid}/stat') as f:
                parts = f.read().rsplit(')', 1)[1].split()
            tot += int(parts[11]) + int(parts[12]) + int(parts[13]) + int(parts[14])
        except OSError:
            pass
    return tot / os.sysconf('SC_CLK_TCK')

agents = int(sys.argv[1]) if len(sys.argv) > 1 else 256
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 1
marks = []
_orig = b6._cpu
def _cpu():
    marks.append(pg_cpu())
    return _orig()
b6._cpu = _cpu
t = Target(os.environ.get('PG', 'postgresql://postgres@127.0.0.1:5432/eg_b'))
for _ in range(reps):
    c0 = pg_cpu()
    f = b6.in_process(t, agents, agents * b6.PER_AGENT, 100.0)
    c1 = pg_cpu()
    n = f.notes
    print(f"{open('/proc/loadavg').read().split()[0]} ratio={f.ratio:.3f} {f.effectgate:.0f}/s p99add={n['p99_added_ms']} cpu={n['cpu_us_per_action']} commits={n.get('commits_per_action')} pgcpu_us={(marks[-1]-marks[-2])/n['n']*1e6:.0f}", flush=True)
t.close()
