import sys, collections, re
groups = [("effectgate", r"\(effectgate/"), ("mcp SDK", r"\((mcp|mcp_types)/"), ("starlette/fastapi", r"\((starlette|fastapi)/"), ("uvicorn", r"\(uvicorn/"), ("pydantic", r"\(pydantic"), ("psycopg/sqlite", r"\(psycopg")]
c = collections.Counter(); total = 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" "); n = int(n)
    frames = stack.split(";")
    owner = "other"
    for f in reversed(frames):
        hit = next((g for g, p in groups if re.search(p, f)), None)
        if hit:
            owner = hit
            # effectgate's entry frames (cli/serve) are roots: skip them unless leaf-most
            if hit == "effectgate" and re.search(r"cli/|__main__", f):
                owner = "loop (uvloop/asyncio)"
            break
    c[owner] += n; total += n
for k, v in c.most_common():
    print(f"{100*v/total:5.1f}% {k}")
print("samples", total)
