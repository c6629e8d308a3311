import sys, time, uuid
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.bench.common import INTENT_BODY, bench_gate
from effectgate.store.postgres import PostgresStore, drop_schema
url = "postgresql://postgres@127.0.0.1:5432/eg_h5"
schema = "b1cpu_" + uuid.uuid4().hex[:8]
store = PostgresStore(url, schema=schema, max_size=1)
try:
    gate = bench_gate(store, PaperAdapter(PaperVenue()))
    for i in range(100): gate.submit("submit_order", f"w{i}", INTENT_BODY)
    if len(sys.argv) > 1:
        import cProfile, pstats
        pr = cProfile.Profile(); pr.enable()
    c0 = time.process_time(); t0 = time.perf_counter()
    N = 2000
    for i in range(N): gate.submit("submit_order", f"a{i}", INTENT_BODY)
    print(f"cpu_us={1e6*(time.process_time()-c0)/N:.0f} wall_us={1e6*(time.perf_counter()-t0)/N:.0f}")
    if len(sys.argv) > 1:
        pr.disable(); pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
finally:
    store.close(); drop_schema(url, schema)
