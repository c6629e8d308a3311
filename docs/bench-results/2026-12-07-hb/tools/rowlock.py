import sys, os
from effectgate.store import postgres as pgm
from effectgate.store._postgres_wire import Prepared
if sys.argv.pop(1) == "slim":
    pgm._P_ROW_LOCK = Prepared.positional("eg_row_lock2", "SELECT FROM operations WHERE scope = %s AND operation_id = %s FOR UPDATE")
exec(open('b6ip.py').read())
