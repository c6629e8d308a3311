import time, threading, os
from effectgate.bench.common import Target
from effectgate.store import open_store
t = Target('postgresql://postgres@127.0.0.1:5432/eg_b')
with t.pg_schema("tok") as url:
    store = open_store(url, create=True)
    tok = store.create_principal("a", "agent", "default", created_by="os:x", now=time.time()).token
    for i in range(200): store.principal_for_token(tok)
    def run(nthreads, per):
        def w():
            for i in range(per): store.principal_for_token(tok)
        ths = [threading.Thread(target=w) for _ in range(nthreads)]
        c0 = time.process_time(); t0 = time.perf_counter()
        for th in ths: th.start()
        for th in ths: th.join()
        n = nthreads * per
        print(f"threads={nthreads} {n/(time.perf_counter()-t0):.0f}/s cpu={ (time.process_time()-c0)/n*1e6:.0f}us/call")
    run(1, 2000); run(64, 40); run(256, 10)
    store.close()
t.close()
