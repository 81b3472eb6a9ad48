# Prints the addresses of the code objects of a function "first" and of
# make, then answers lines on stdin. "code": frees what holds first's
# address and compiles functions "second" until one's code object takes
# it (CPython's allocator hands out the block freed last first). "data":
# the same with bytes objects of the code object's size, so that the
# address holds something other than a code object. Each says "reused",
# or "not reused" when no object took the address.
import gc
import sys


def make(name):
    ns = {}
    exec(compile("def %s():\n    return 1\n" % name, "<%s>" % name, "exec"), ns)
    return ns[name].__code__


first = make("first")
addr = id(first)
size = sys.getsizeof(first)
print(hex(addr), hex(id(make.__code__)), flush=True)
held = first
del first
for line in sys.stdin:
    if line.strip() == "data":
        new = lambda: bytes(size - sys.getsizeof(b""))
    else:
        new = lambda: make("second")
    held = None
    # A function and the namespace it was made in refer to each other:
    # first's code object is freed with them, by the collector.
    gc.collect()
    keep = []
    for _ in range(10000):
        obj = new()
        if id(obj) == addr:
            held = obj
            print("reused", flush=True)
            break
        keep.append(obj)
    else:
        print("not reused", flush=True)
    del keep
